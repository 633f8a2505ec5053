"""Kueue (kueue.x-k8s.io): quota-based admission of a shared cluster's batch jobs.

With the connection's ``queueing: kueue`` a job names its LocalQueue and WorkloadPriorityClass in
Kueue's labels and is created suspended; Kueue creates a Workload owned by the job, reserves quota
for it (or says in its conditions why it cannot: e.g. insufficient quota in a ClusterQueue), then
unsuspends the job. When Kueue evicts the job (preemption by a higher priority, a quota change), it
suspends it again and requeues it by itself: the same job object is admitted again later, so an
evicted job is PREEMPTED with the reason ``REQUEUED``, which the follower waits through instead of
resubmitting.

Workloads are read through the shared watch of their namespace (not selected by label: Kueue does
not copy the job's labels onto its Workload), keyed by the job that owns each one.
"""

from __future__ import annotations

import re

from airflow_ml_provider.jobs.spec import TrainingJobSpec

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"  # names a WorkloadPriorityClass, not a pod PriorityClass
WORKLOAD_API = "kueue.x-k8s.io/v1beta1"  # served by every Kueue release up to v0.19 (beside v1beta2)
QUEUEING = ("kueue",)  # the values of the connection's ``queueing`` extra (unset: no queueing system)
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def queueing(value: object) -> str | None:
    """The connection's ``queueing`` extra, checked: None (unset) or one of QUEUEING."""
    if value in (None, ""):
        return None
    if value not in QUEUEING:
        raise ValueError(f"queueing: {value!r} is not a queueing system this provider knows; use one of "
                         f"{list(QUEUEING)} or leave it unset")
    return value


def label_value(field: str, value: str) -> str:
    """``value`` if Kubernetes accepts it as a label value, else ValueError naming ``field``."""
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        raise ValueError(f"{field}: {value!r} is not a Kubernetes label value (at most 63 letters, digits, "
                         "'-', '_' and '.', starting and ending with a letter or digit)")
    return value


def queued(spec: TrainingJobSpec) -> tuple[TrainingJobSpec, dict[str, str]]:
    """The spec without its queue and priority class (Kueue's, not a batch scheduler's or the pods'
    PriorityClass) and the labels that hand them to Kueue. A job Kueue manages must name its
    LocalQueue: Kueue leaves a suspended job without one suspended for ever."""
    scheduling = spec.scheduling
    if not scheduling.queue:
        raise ValueError("scheduling.queue: the connection's queueing is 'kueue', which admits only jobs that "
                         "name their LocalQueue")
    labels = {QUEUE_LABEL: label_value("scheduling.queue", scheduling.queue)}
    if scheduling.priority_class:
        labels[PRIORITY_LABEL] = label_value("scheduling.priority_class", scheduling.priority_class)
    plain = scheduling.model_copy(update={"queue": None, "priority_class": None})
    return spec.model_copy(update={"scheduling": plain}), labels


def suspend(obj: dict, path: tuple[str, ...]) -> None:
    """Set ``obj``'s suspend field (``path``, e.g. ``("spec", "runPolicy", "suspend")``) to true."""
    *parents, last = path
    for key in parents:
        obj = obj.setdefault(key, {})
    obj[last] = True


def owner_key(api_version: str, kind: str, name: str) -> str:
    """How the Workload watch files a Workload: by the job that controls it."""
    return f"{api_version.split('/')[0]}/{kind}/{name}"


def workload_owner(workload: dict) -> str | None:
    """The ``owner_key`` of the job that controls ``workload`` (Kueue's owner reference), if any."""
    for ref in workload["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") and ref.get("name"):
            return owner_key(ref.get("apiVersion") or "", ref["kind"], ref["name"])
    return None


def watched_workload(workload: dict) -> dict:
    """What the shared Workload watch keeps of a Workload: what ``status.workload_status`` and ``workload_owner``
    read (not its pod sets, which hold the job's pod templates)."""
    meta = workload.get("metadata") or {}
    return {"metadata": {key: meta[key] for key in ("name", "ownerReferences", "resourceVersion") if key in meta},
            "spec": {"queueName": (workload.get("spec") or {}).get("queueName")},
            "status": {"conditions": (workload.get("status") or {}).get("conditions") or []}}
