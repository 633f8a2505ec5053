"""What Kubernetes' Job controller makes of an Indexed Job (an indexed-job backend's Job, a TrainJob's JobSet's
Job), and its pods run as containers (tests/pod_containers.py).

From kubernetes/kubernetes pkg/controller/job/, job_controller.go at 6ae037f1db843e99547258d7dd292301a74ba0eb and
indexed_job_utils.go at 78fc8e44052f699bf598f84b697b41e5a328c9c5 (the versions the public index holds: the
repository is too large to fetch here, so no release tag's copy could be read; both carry the 1.29-and-later
features used below, PodIndexLabel and the SuccessCriteriaMet/FailureTarget conditions, and the behaviours played
here are the same in 1.29 to 1.37):

- one pod per completion index, ``min(completions - succeeded, parallelism)`` of them at once (job_controller.go
  :1569-1572; all of them, as the provider renders parallelism = completions), each with the completion-index
  annotation (:1674, indexed_job_utils.go:486-491), the same label (job_controller.go:1676-1678,
  indexed_job_utils.go:493-499: PodIndexLabel, on by default since 1.28) and hostname ``<job>-<index>``
  (job_controller.go:1679); every container gets ``JOB_COMPLETION_INDEX`` (indexed_job_utils.go:37) from that
  label by the downward API (job_controller.go:1643-1646, indexed_job_utils.go:455-484; from the annotation where
  PodIndexLabel is off);
- restartPolicy Never: a failed pod is counted (job_controller.go:828-830) and the Job fails once the failures exceed
  ``backoffLimit`` (``jobCtx.failed > *job.Spec.BackoffLimit``, :842, :857-860; default 6, the API's), else a new
  pod is made for the index (manageJob from :1533, firstPendingIndexes indexed_job_utils.go:247-275). The
  controller waits its pod-failure backoff before that pod (10 s, doubling: job_controller.go:70-72, :1608-1616);
  this stand-in does not;
- restartPolicy OnFailure: the kubelet restarts the container in place, and the restart counts of the Job's
  Running and Pending pods fail the Job once they reach ``backoffLimit``, or at the first restart with a
  backoffLimit of 0 (:1446-1469, ``pastBackoffLimitOnFailure``);
- a failed Job's active pods are deleted (:891-893, deleteActivePods :999-1025);
- the Job completes when every index has a succeeded pod (:870-871, calculateSucceededIndexes
  indexed_job_utils.go:61-75; :925, ``succeeded >= completions && active == 0``);
- a suspended Job (``spec.suspend``, as Kueue's integration submits it) has no pod (:1543-1554): ``run`` returns
  None for it.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

from pod_containers import PodNetwork

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # the annotation's and the label's key
COMPLETION_INDEX_FIELD = f"metadata.annotations['{COMPLETION_INDEX}']"
COMPLETION_INDEX_LABEL_FIELD = f"metadata.labels['{COMPLETION_INDEX}']"  # JOB_COMPLETION_INDEX's, under PodIndexLabel


class IndexedJob:
    """Runs one Indexed Job's pods to the Job's end: ``run`` returns "Complete" or "Failed"."""

    def __init__(self, name: str, job_spec: dict, pods: PodNetwork, claims: dict[str, Path], *,
                 hostname: str | None = None, subdomain: str | None = None):
        self.name, self.spec, self.pods, self.claims = name, copy.deepcopy(job_spec), pods, claims
        self.template = self.spec["template"]["spec"]
        self.subdomain = subdomain or self.template.get("subdomain") or ""
        self.hostname = hostname or name  # the Job's name: a JobSet's Job is <jobset>-<replicated job>-<i>
        self.completions = self.spec.get("completions", 1)
        self.failures = 0
        self.pod_names: dict[int, list[str]] = {i: [] for i in range(self.completions)}

    def host(self, index: int) -> str:
        return f"{self.hostname}-{index}"

    def _start(self, index: int) -> None:
        pod = copy.deepcopy(self.template)
        container = pod["containers"][0]
        # indexed_job_utils.go:464-484: JOB_COMPLETION_INDEX from the pod's label, unless the container sets it
        if not any(var["name"] == "JOB_COMPLETION_INDEX" for var in container.get("env", [])):
            container.setdefault("env", []).append(
                {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_LABEL_FIELD}}})
        host = self.host(index)
        if self.pod_names[index]:  # a replacement pod: the failed one kept under another name
            self.pods.rename_stopped(host, f"{host}-try{len(self.pod_names[index])}")
        self.pods.start(host, self.subdomain, pod, container, claims=self.claims,
                        fields={COMPLETION_INDEX_FIELD: str(index), COMPLETION_INDEX_LABEL_FIELD: str(index)})
        self.pod_names[index].append(self.pods.pods[host])

    def run(self, timeout_s: float, order: list[int] | None = None) -> str | None:
        """Every index's pod (in ``order``, default ascending), then follow them to the Job's end; None for a
        suspended Job, which runs no pod."""
        if self.spec.get("suspend"):  # job_controller.go:1543-1554: its active pods deleted, none created
            return None
        backoff = self.spec.get("backoffLimit", 6)
        restart = self.template.get("restartPolicy", "Never")
        for index in order or range(self.completions):
            self._start(index)
        succeeded: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            restarts = 0
            for index in range(self.completions):
                if index in succeeded:
                    continue
                host = self.host(index)
                state = self.pods.state(host)
                restarts += self.pods.restarts(host)
                if state["Status"] not in ("exited", "stopped"):
                    continue
                if state["ExitCode"] == 0:
                    succeeded.add(index)
                elif restart == "Never":
                    self.failures += 1
                    if self.failures > backoff:
                        return self._fail()
                    self._start(index)
            if restart == "OnFailure" and (restarts > 0 if backoff == 0 else restarts >= backoff):  # :1466-1469
                return self._fail()
            if len(succeeded) == self.completions:
                return "Complete"
            time.sleep(1)
        self._fail()
        return "Running"

    def _fail(self) -> str:
        """deleteActivePods: the Job failed, its running pods go."""
        for index in range(self.completions):
            self.pods.kill(self.host(index))
        return "Failed"
