"""What Kubernetes' Job controller makes of an Indexed Job (an indexed-job backend's Job, a TrainJob's JobSet's
Job), and its pods run as containers (tests/pod_containers.py).

From kubernetes' pkg/controller/job (job_controller.go, indexed_job_utils.go; functions named below: the
kubernetes repository is too large to fetch here, so no ref's line numbers are pinned):

- one pod per completion index, ``parallelism`` of them at once (all, as the provider renders parallelism =
  completions): the completion-index annotation ``batch.kubernetes.io/job-completion-index`` and hostname
  ``<job>-<index>`` on each (job_controller.go ``manageJob``: ``addCompletionIndexAnnotation``,
  ``template.Spec.Hostname = fmt.Sprintf("%s-%d", job.Name, completionIndex)``), and ``JOB_COMPLETION_INDEX`` from
  that annotation by the downward API (indexed_job_utils.go ``addCompletionIndexEnvVariable``);
- restartPolicy Never: a failed pod is replaced by a new one for its index while the failures stay within
  ``backoffLimit`` (default 6), else the Job fails and its running pods are deleted (job_controller.go
  ``syncJob``: ``exceedsBackoffLimit``, ``deleteActivePods``); OnFailure: the kubelet restarts the container in
  place and those restarts count against backoffLimit (``pastBackoffLimitOnFailure``);
- the Job completes when every index has a succeeded pod (``succeededIndexes`` covering ``completions``).
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

from pod_containers import PodNetwork

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_FIELD = f"metadata.annotations['{COMPLETION_INDEX}']"


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
        # addCompletionIndexEnvVariable: JOB_COMPLETION_INDEX from the annotation, for every container
        container.setdefault("env", []).append(
            {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_FIELD}}})
        host = self.host(index)
        if self.pod_names[index]:  # a replacement pod: the failed one kept under another name
            self.pods.rename_stopped(host, f"{host}-try{len(self.pod_names[index])}")
        self.pods.start(host, self.subdomain, pod, container, claims=self.claims,
                        fields={COMPLETION_INDEX_FIELD: str(index)})
        self.pod_names[index].append(self.pods.pods[host])

    def run(self, timeout_s: float, order: list[int] | None = None) -> str:
        """Every index's pod (in ``order``, default ascending), then follow them to the Job's end."""
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
            if restart == "OnFailure" and restarts > backoff:
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
