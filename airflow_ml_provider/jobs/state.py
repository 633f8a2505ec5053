"""The one normalized state machine every backend maps onto."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class JobState(str, Enum):
    PENDING = "PENDING"
    GANG_PENDING = "GANG_PENDING"  # accepted, but the whole gang of workers cannot be placed yet
    QUEUED = "QUEUED"  # waiting for a queueing system (Kueue) to admit it: quota, before any placement
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    PREEMPTED = "PREEMPTED"  # workers were evicted or killed from outside; resumable from a checkpoint
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.PREEMPTED})

# Machine-readable reasons (``JobStatus.reason``): what callers branch on, never the message's wording.
NEVER_LAUNCHED = "NeverLaunched"  # FAILED before any worker started (its submitter died): safe to submit again
REQUEUED = "Requeued"  # PREEMPTED, but its queue (Kueue) admits the same job object again: wait, never resubmit


@dataclass(frozen=True)
class JobStatus:
    """A job's state plus what a user needs to understand it (``message``, per-worker exit codes) and,
    for the cases callers act on, a machine-readable ``reason`` (one of this module's constants)."""

    state: JobState
    message: str = ""
    exit_codes: dict[int, int] = field(default_factory=dict)
    reason: str = ""
    # (settled, total) of a job whose backend counts its units of work itself (an Indexed Job's shards); else None
    progress: tuple[int, int] | None = None

    @property
    def ended(self) -> bool:
        """Terminal for good: a REQUEUED preemption is not, since the same job comes back by itself."""
        return self.state.is_terminal and self.reason != REQUEUED

    def to_dict(self) -> dict:
        return {
            "state": self.state.value,
            "message": self.message,
            "exit_codes": {str(rank): code for rank, code in self.exit_codes.items()},
            "reason": self.reason,
            **({"progress": list(self.progress)} if self.progress is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: dict) -> JobStatus:
        return cls(
            state=JobState(data["state"]),
            message=data.get("message", ""),
            exit_codes={int(rank): int(code) for rank, code in data.get("exit_codes", {}).items()},
            reason=data.get("reason", ""),  # records written before reasons existed have none
            progress=(int(data["progress"][0]), int(data["progress"][1])) if data.get("progress") else None,
        )
