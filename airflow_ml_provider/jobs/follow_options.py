"""How a job is followed (``follow=`` of the job-running operators), apart from the follow core
(``jobs.follow``) so that a DAG file building operators checks these options at parse without importing
the core, its metrics tracker and log sources."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow_ml_provider.logs.rules import LogRules


@dataclass(frozen=True)
class FollowOptions:
    """How to follow: all JSON-serializable, so a trigger carries them.

    Args:
        rules: ``fail_on``/``retry_on``/``succeed_on``/``metrics`` regexes (see LogRules).
        max_preemptions: resubmissions after a preemption before the task fails (0: none). A preemption
            the job's queue takes back by itself (Kueue's eviction: reason REQUEUED) is waited through,
            never resubmitted, and not counted.
        max_queue_s: how long the job may wait for admission by its queue (QUEUED, or evicted and
            requeued) before it is stopped and the task fails with the queue's last reason; None: no limit.
        poll_interval: seconds between rounds while nothing is new.
        settle_s: how long after the job ended lines may still arrive (a shipped log); 0 for files.
        outage_grace_s: how long the log store may stay unreadable before the task fails (retryably).
        deadline: wall-clock time (epoch seconds) after which the job is stopped and the task fails.
        artifact_roots: where the job may report its model and checkpoints; a path from a log line
            outside all of them (any path, when there are none) is ignored with a warning: a pod's
            output is not trusted.
        metric_goals: ``{"auc": "max"}`` where the default direction is wrong.
        tail_lines: last lines kept for failure messages (each cut to TAIL_LINE_CHARS characters).
        max_lines: lines per read; a full batch means more are ready.
        task_log_lines: the most of the job's lines shown in the task log (None: all); past it, one line
            says where ``full_log`` is, and metrics and rules still read every line.
        full_log: where the job's whole log is (``LogSource.location``), named once the task log is capped.
    """

    rules: dict[str, list[str]] = field(default_factory=dict)
    max_preemptions: int = 3
    max_queue_s: float | None = None
    poll_interval: float = 1.0
    settle_s: float = 0.0
    outage_grace_s: float = 600.0
    deadline: float | None = None
    artifact_roots: tuple[str, ...] = ()
    metric_goals: dict[str, str] = field(default_factory=dict)
    tail_lines: int = 20
    max_lines: int = 5000
    task_log_lines: int | None = None
    full_log: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"rules": self.rules, "max_preemptions": self.max_preemptions,
                "max_queue_s": self.max_queue_s, "poll_interval": self.poll_interval,
                "settle_s": self.settle_s, "outage_grace_s": self.outage_grace_s, "deadline": self.deadline,
                "artifact_roots": list(self.artifact_roots), "metric_goals": self.metric_goals,
                "tail_lines": self.tail_lines, "max_lines": self.max_lines, "task_log_lines": self.task_log_lines,
                "full_log": self.full_log}

    def __post_init__(self) -> None:
        """Refuse what cannot work, naming the field: a bad regex, a negative budget or interval."""
        unknown = set(self.rules) - {"succeed_on", "fail_on", "retry_on", "metrics"}
        if unknown:
            raise ValueError(f"rules: unknown kind(s) {sorted(unknown)}; known: succeed_on, fail_on, retry_on, metrics")
        LogRules(**self.rules)  # raises ValueError naming the rule, index and pattern
        if not isinstance(self.max_preemptions, int) or self.max_preemptions < 0:
            raise ValueError(f"max_preemptions: {self.max_preemptions!r} is not a whole number >= 0")
        if not isinstance(self.poll_interval, int | float) or self.poll_interval <= 0:
            raise ValueError(f"poll_interval: {self.poll_interval!r} is not a number of seconds > 0")
        if self.max_queue_s is not None and (not isinstance(self.max_queue_s, int | float) or not self.max_queue_s > 0):
            raise ValueError(f"max_queue_s: {self.max_queue_s!r} is not a positive number of seconds")
        if self.task_log_lines is not None and (not isinstance(self.task_log_lines, int) or self.task_log_lines < 0):
            raise ValueError(f"task_log_lines: {self.task_log_lines!r} is not a whole number >= 0")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FollowOptions:
        return cls(**{**data, "artifact_roots": tuple(data.get("artifact_roots", ()))})

    @classmethod
    def of(cls, value: FollowOptions | dict[str, Any] | None) -> FollowOptions:
        """An operator's ``follow=`` argument: the options, their dict (a Param, a recipe), or None."""
        if isinstance(value, cls):
            return value
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"follow: expected FollowOptions or a dict, got {type(value).__name__}")
        try:
            return cls.from_dict(value or {})
        except TypeError as exc:  # an unknown key
            raise ValueError(f"follow: {exc}") from None
