"""How a Kubernetes job's state is decided, in one pure place: no call, no clock, no client.

A backend reads its primary object's status onto a JobStatus (``job_status``, with ``said`` and ``ended``
from here); ``compose`` then adds what the cluster around the job says: its gang's PodGroup
(``gang_status``), its Kueue Workload (``workload_status``) and its pods (why one is lost: ``disruption``).
The sync path (``KubernetesBackend.status``) and the async one (``statuses``, from the shared watches) only
read those objects and hand them to ``compose``, so both decide alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_ml_provider.jobs.state import REQUEUED, JobState, JobStatus

# What a controller's message says when a pod was taken away rather than failed: the Kubelet's and the
# eviction API's "Evicted", the scheduler's preemption, the DisruptionTarget condition (kubernetes 1.26+),
# the MPI operator's "MPIJobEvicted", Volcano's "PodEvicted". Such a failure is a preemption: the job is
# resubmitted from its checkpoint instead of failing.
EVICTION_WORDS = ("evict", "preempt", "disruption")


@dataclass(frozen=True)
class Surroundings:
    """What the cluster says about a job besides its own object; every field read by the caller.

    Args:
        gang: the job's PodGroup, read while the job is pending and asks for a gang (None: none read).
        queued: whether Kueue admits the job (the connection's ``queueing``).
        workload: its Kueue Workload, when ``queued`` (None: Kueue has made none yet).
        lost: why one of its pods can no longer run (``disruption``), or None.
    """

    gang: dict | None = None
    queued: bool = False
    workload: dict | None = None
    lost: str | None = None


def said(condition: dict, default: str = "") -> str:
    """What a condition (or Volcano's ``status.state``) says: ``reason: message``, either alone, or ``default``."""
    return f"{condition.get('reason') or ''}: {condition.get('message') or ''}".strip(": ") or default


def evicted(message: str) -> bool:
    """Whether a controller's message says a pod was taken away (EVICTION_WORDS), not that it failed."""
    return any(word in message.lower() for word in EVICTION_WORDS)


def ended(state: JobState, message: str) -> JobStatus:
    """The status of a job its controller says ended in ``state``: a failure whose message speaks of an
    eviction is PREEMPTED."""
    if state is JobState.FAILED and evicted(message):
        return JobStatus(JobState.PREEMPTED, message)
    return JobStatus(state, message)


def gang_status(group: dict) -> JobStatus | None:
    """GANG_PENDING with the scheduler's reason when a PodGroup says its gang cannot be placed whole.

    Volcano (scheduling.volcano.sh) records it as its latest true condition, ``Unschedulable``;
    scheduler-plugins (scheduling.x-k8s.io) as the phase ``Pending`` ("accepted, but the scheduler
    cannot allocate enough resources") or ``Unknown`` (part of the gang placed, the rest cannot be).
    """
    status = group.get("status") or {}
    if group["apiVersion"].startswith("scheduling.volcano.sh/"):
        true = [c for c in status.get("conditions") or [] if c.get("status") == "True"]
        latest = max(true, key=lambda c: c.get("lastTransitionTime") or "", default={})
        if latest.get("type") == "Unschedulable":
            return JobStatus(JobState.GANG_PENDING, latest.get("message") or latest.get("reason")
                             or "gang cannot be scheduled")
        return None
    if status.get("phase") in ("Pending", "Unknown"):
        minimum = (group.get("spec") or {}).get("minMember", "?")
        return JobStatus(JobState.GANG_PENDING, f"PodGroup {group['metadata']['name']} is {status['phase']}: "
                                                f"{status.get('running', 0)}/{minimum} pods running")
    return None


def workload_status(workload: dict | None, job: JobStatus) -> JobStatus:
    """The job's status as Kueue's admission shapes it. ``job`` is what the job object alone says: it
    stands once the job has ended and while Kueue admits it. Before admission the job is QUEUED with
    Kueue's reason (the QuotaReserved condition's message); while it is evicted and requeued it is
    PREEMPTED with the eviction's reason and the machine-readable reason REQUEUED."""
    if job.state.is_terminal:
        return job
    if workload is None:
        if job.state is JobState.PENDING:
            return JobStatus(JobState.QUEUED, "waiting for Kueue to create the job's Workload")
        return job
    conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
    true = {kind for kind, c in conditions.items() if c.get("status") == "True"}
    if "Finished" in true:
        return job
    waiting = conditions.get("QuotaReserved") or {}
    reason = said(waiting) if waiting.get("status") == "False" else ""
    if "Evicted" in true:
        message = f"evicted by Kueue ({said(conditions['Evicted'], 'evicted')}); requeued"
        return JobStatus(JobState.PREEMPTED, message + (f", waiting: {reason}" if reason else ""), reason=REQUEUED)
    if "Admitted" in true:
        if job.state is JobState.PENDING:
            return JobStatus(JobState.PENDING, "admitted by Kueue; waiting for its pods")
        return job
    queue = workload.get("spec", {}).get("queueName") or "?"
    return JobStatus(JobState.QUEUED, reason or f"waiting for admission by Kueue (LocalQueue {queue})")


def compose(job: JobStatus, around: Surroundings) -> JobStatus:
    """The job's status: what its object says (``job``), then its gang (only while it is pending), then Kueue's
    admission, then its pods: a pod that can no longer run makes a job that has not ended PREEMPTED, unless
    Kueue evicted it and requeues it itself (PREEMPTED with the reason REQUEUED stands)."""
    status = job
    if around.gang is not None and status.state is JobState.PENDING:
        status = gang_status(around.gang) or status
    if around.queued:
        status = workload_status(around.workload, status)
    if around.lost and not status.state.is_terminal:
        return JobStatus(JobState.PREEMPTED, around.lost)
    return status
