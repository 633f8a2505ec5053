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
  None for it;
- parallelism below completions (a sharded job's M pods for N shards): at most ``parallelism`` pods at once, a new
  one for the lowest pending index as one ends (manageJob's wantActive, :1569-1572; firstPendingIndexes,
  indexed_job_utils.go:247-275, which skips succeeded, active and failed indexes);
- ``backoffLimitPerIndex`` (where the Job sets it; the feature gate on by default since 1.29): a failed pod's index
  gets a new pod whose ``batch.kubernetes.io/job-index-failure-count`` annotation is the failed pod's + 1
  (job_controller.go:1681-1683, indexed_job_utils.go:349-376; 0 on an index's first pod), until a pod fails with
  that count at ``backoffLimitPerIndex``: then the index failed (isIndexFailed, indexed_job_utils.go:98-112) and gets
  no pod again; more failed indexes than ``maxFailedIndexes`` fail the Job (``MaxFailedIndexesExceeded``,
  job_controller.go:876-877), and once every index succeeded or failed with some failed the Job fails with reason
  ``FailedIndexes`` (:878-879); ``status`` has ``completedIndexes`` and ``failedIndexes`` as the controller writes
  them (indexed_job_utils.go orderedIntervals.String, 1-element intervals and ``a-b`` ranges, here as single
  indexes and ranges). The global ``backoffLimit`` then is the API server's default, MaxInt32: not counted here.
  ``podFailurePolicy`` is not played: no pod here is disrupted (a killed container is a failure it counts);
- every pod carries its Job's uid as the ``controller-uid`` and ``batch.kubernetes.io/controller-uid`` labels, which
  the API server puts in the Job's template when it generates its selector (pkg/registry/batch/job/strategy.go
  ``generateSelector``; the v1.20.2 test server's ``controller-uid`` is read back in
  tests/integration/kubernetes/test_sharded_indexed_job.py), and which the downward API reads.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

from pod_containers import PodNetwork

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # the annotation's and the label's key
COMPLETION_INDEX_FIELD = f"metadata.annotations['{COMPLETION_INDEX}']"
COMPLETION_INDEX_LABEL_FIELD = f"metadata.labels['{COMPLETION_INDEX}']"  # JOB_COMPLETION_INDEX's, under PodIndexLabel
FAILURE_COUNT_FIELD = "metadata.annotations['batch.kubernetes.io/job-index-failure-count']"
UID_FIELDS = ("metadata.labels['controller-uid']", "metadata.labels['batch.kubernetes.io/controller-uid']")


class IndexedJob:
    """Runs one Indexed Job's pods to the Job's end: ``run`` returns "Complete" or "Failed" (``reason`` says why)."""

    def __init__(self, name: str, job_spec: dict, pods: PodNetwork, claims: dict[str, Path], *,
                 hostname: str | None = None, subdomain: str | None = None, uid: str = "job-uid-0",
                 config_maps: dict[str, Path] | None = None):
        self.name, self.spec, self.pods, self.claims = name, copy.deepcopy(job_spec), pods, claims
        self.template = self.spec["template"]["spec"]
        self.subdomain = subdomain or self.template.get("subdomain") or ""
        self.hostname = hostname or name  # the Job's name: a JobSet's Job is <jobset>-<replicated job>-<i>
        self.completions = self.spec.get("completions", 1)
        self.parallelism = self.spec.get("parallelism", 1)  # the API's default
        self.per_index = self.spec.get("backoffLimitPerIndex")
        self.uid, self.config_maps = uid, config_maps or {}
        self.failures = 0
        self.reason = ""
        self.ended: str | None = None  # its terminal condition's type, once it ended
        self.pod_names: dict[int, list[str]] = {i: [] for i in range(self.completions)}
        self.failure_count: dict[int, int] = {}  # index -> its latest pod's failure-count annotation
        self.succeeded: set[int] = set()
        self.failed_indexes: set[int] = set()
        self.max_active = 0  # the most pods it had at once

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
        fields = {COMPLETION_INDEX_FIELD: str(index), COMPLETION_INDEX_LABEL_FIELD: str(index),
                  **dict.fromkeys(UID_FIELDS, self.uid)}
        if self.per_index is not None:
            fields[FAILURE_COUNT_FIELD] = str(self.failure_count.setdefault(index, 0))
        self.pods.start(host, self.subdomain, pod, container, claims=self.claims, fields=fields,
                        config_maps=self.config_maps)
        self.pod_names[index].append(self.pods.pods[host])

    def _pending(self, active: set[int], order: list[int]) -> list[int]:
        """firstPendingIndexes (indexed_job_utils.go:247-275): indexes neither succeeded, active nor failed, in
        ``order`` (the controller's is ascending)."""
        return [i for i in order if i not in self.succeeded and i not in active and i not in self.failed_indexes]

    def run(self, timeout_s: float, order: list[int] | None = None, on_tick=None) -> str | None:
        """The Job's pods, at most ``parallelism`` at once (first in ``order``, default ascending), followed to the
        Job's end; None for a suspended Job, which runs no pod. ``on_tick(self)`` is called on every look at them."""
        if self.spec.get("suspend"):  # job_controller.go:1543-1554: its active pods deleted, none created
            return None
        backoff = self.spec.get("backoffLimit", 6)
        restart = self.template.get("restartPolicy", "Never")
        order = list(order or range(self.completions))
        active: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            # manageJob (:1569-1572): wantActive = min(completions - succeeded, parallelism)
            want = min(self.completions - len(self.succeeded), self.parallelism)
            for index in self._pending(active, order)[:max(want - len(active), 0)]:
                self._start(index)
                active.add(index)
            self.max_active = max(self.max_active, len(active))
            if on_tick is not None:
                on_tick(self)
            restarts = 0
            for index in sorted(active):
                host = self.host(index)
                state = self.pods.state(host)
                restarts += self.pods.restarts(host)
                if state["Status"] not in ("exited", "stopped"):
                    continue
                if state["ExitCode"] == 0:
                    self.succeeded.add(index)
                    active.discard(index)
                elif restart == "Never":
                    self.failures += 1
                    active.discard(index)
                    if self.per_index is None:
                        if self.failures > backoff:  # :842, :857-860
                            return self._fail(active, "BackoffLimitExceeded")
                        self._start(index)  # (the failed pod's index first: it stays the lowest pending one)
                        active.add(index)
                    elif self.failure_count[index] >= self.per_index:  # isIndexFailed
                        self.failed_indexes.add(index)
                    else:  # getNewIndexFailureCounts: the replacement's count is the failed pod's + 1
                        self.failure_count[index] += 1
            if self.per_index is not None:
                limit = self.spec.get("maxFailedIndexes")
                if limit is not None and len(self.failed_indexes) > limit:  # :876-877
                    return self._fail(active, "MaxFailedIndexesExceeded")
                if self.failed_indexes and len(self.failed_indexes) + len(self.succeeded) >= self.completions:
                    return self._fail(active, "FailedIndexes")  # :878-879
            if restart == "OnFailure" and (restarts > 0 if backoff == 0 else restarts >= backoff):  # :1466-1469
                return self._fail(active, "BackoffLimitExceeded")
            if len(self.succeeded) == self.completions:
                self.ended = "Complete"
                return "Complete"
            time.sleep(1)
        self._fail(active, "")
        self.ended = None
        return "Running"

    @property
    def status(self) -> dict:
        """The Job's status as the controller writes it: its indexes, and once it ended its condition (the terminal
        one, with the failure's reason: job_controller.go:876-879, :860)."""
        status = {"completedIndexes": _intervals(self.succeeded), "succeeded": len(self.succeeded)}
        if self.per_index is not None:
            status["failedIndexes"] = _intervals(self.failed_indexes)
        if self.ended is not None:
            status["conditions"] = [{"type": self.ended, "status": "True",
                                     **({"reason": self.reason} if self.ended == "Failed" else {})}]
        return status

    def _fail(self, active: set[int], reason: str) -> str:
        """deleteActivePods (:891-893): the Job failed, its running pods go."""
        self.reason, self.ended = reason, "Failed"
        for index in active or range(self.completions):
            if self.host(index) in self.pods.pods:
                self.pods.kill(self.host(index))
        return "Failed"


def _intervals(indexes: set[int]) -> str:
    """orderedIntervals.String (indexed_job_utils.go): ``0-2,4,6,7``."""
    parts, ordered = [], sorted(indexes)
    while ordered:
        first = last = ordered.pop(0)
        while ordered and ordered[0] == last + 1:
            last = ordered.pop(0)
        parts.append(str(first) if first == last else f"{first},{last}" if last == first + 1 else f"{first}-{last}")
    return ",".join(parts)
