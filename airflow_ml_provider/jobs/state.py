"""The one normalized state machine every backend maps onto."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class JobState(str, Enum):
    PENDING = "PENDING"
    GANG_PENDING = "GANG_PENDING"  # accepted, but the whole gang of workers cannot be placed yet
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


@dataclass(frozen=True)
class JobStatus:
    """A job's state plus what a user needs to understand it: a reason and per-worker exit codes."""

    state: JobState
    message: str = ""
    exit_codes: dict[int, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "state": self.state.value,
            "message": self.message,
            "exit_codes": {str(rank): code for rank, code in self.exit_codes.items()},
        }

    @classmethod
    def from_dict(cls, data: dict) -> JobStatus:
        return cls(
            state=JobState(data["state"]),
            message=data.get("message", ""),
            exit_codes={int(rank): int(code) for rank, code in data.get("exit_codes", {}).items()},
        )
