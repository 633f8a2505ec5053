"""The LogSource interface: one job's log lines, in order, from a resumable cursor."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, NamedTuple


class LogLine(NamedTuple):
    """One line a worker printed; ``source`` names the worker (``rank 0``, a pod name, ``launcher``).
    A named tuple: as immutable as a frozen dataclass, and made in half the time (one per line read)."""

    source: str
    text: str

    def __str__(self) -> str:
        return f"[{self.source}] {self.text}"


@dataclass(frozen=True)
class LogBatch:
    lines: list[LogLine]
    cursor: Any  # JSON-serializable; pass it back to read() to continue right after the last line


class LogSourceUnavailable(ConnectionError):
    """The log store cannot be read right now (unreachable, overloaded); the same read may succeed later."""


class LogSource(ABC):
    """Reads a job's log in order; reading from a cursor never repeats or skips a line."""

    # How long after a line is printed it may still reach the store. A reader is complete only this
    # long after the job ended: 0 for files written in place, a few seconds for a shipped log.
    settle_s: float = 0.0
    # Whether a resubmitted job (same name, new attempt) starts a new log that is read from its start
    # (a local job's new output file, new pods); False where all attempts share one ordered log.
    restarts_with_job: bool = True

    def location(self) -> str:
        """Where the job's whole log can be read (the task log names it once it is capped)."""
        return "the job's log source"

    @abstractmethod
    def read(self, cursor: Any = None, max_lines: int = 5000) -> LogBatch:
        """Return the next complete lines after ``cursor`` (None: from the beginning)."""
