"""The one place that decides how following a job goes: no clock of its own, and no I/O but resolving a
reported local model/checkpoint path (``os.path.realpath``) before checking that it is the job's.

Given the job's status and the next batch of its log lines, ``Follower.observe`` returns the lines to
show, a log rule's verdict, metric/checkpoint progress and the next action: keep waiting, finish,
resubmit after a preemption, or fail. The operator, the trigger, the sensors and the search's trials
all follow jobs through it (via the sync and async drivers in ``jobs.drivers``), so they cannot
disagree about when a log is complete, when a job is resubmitted or what a rule means.

Its state is a JSON-serializable dict, so a follower rebuilt from it (a triggerer restart, a deferred
task resuming) continues right after the last line it showed, with the same metrics and checkpoint.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from airflow_ml_provider.jobs.backends.base import BackendAccessError, JobNotFound, ResourcesUnavailable
from airflow_ml_provider.jobs.follow_options import FollowOptions
from airflow_ml_provider.jobs.state import REQUEUED, JobState, JobStatus
from airflow_ml_provider.logs.controls import visible_lines
from airflow_ml_provider.logs.metrics import MetricsTracker
from airflow_ml_provider.logs.rules import LogRules, RuleMatch, Verdict
from airflow_ml_provider.logs.source import LogBatch, LogLine, LogSourceUnavailable

TAIL_LINE_CHARS = 4096  # of a line kept in the tail (the saved state): a pod's lines can be any length
TAIL_SOURCE_CHARS = 256
PROGRESS_S = 10.0  # between two lines of a backend's count of a job's settled shards
_REASONS_SHOWN = frozenset({JobState.QUEUED, JobState.GANG_PENDING})  # a new reason of these is logged again


class Action(str, Enum):
    WAIT = "wait"  # read again after ``Decision.delay`` seconds
    FINISH = "finish"  # the job succeeded (or a succeed_on rule matched) and its log is complete
    RESUBMIT = "resubmit"  # the job was preempted: start it again under its name, from ``Decision.resume``
    FAIL = "fail"  # the job failed, vanished, timed out, was refused, or a fail_on/retry_on rule matched


@dataclass(frozen=True)
class ResumePoint:
    """The newest checkpoint a job reported: its path, and the step (and epoch) it holds."""

    path: str
    step: int | None = None
    epoch: int | None = None

    def describe(self) -> str:
        where = ", ".join(f"{k} {v}" for k, v in (("step", self.step), ("epoch", self.epoch)) if v is not None)
        return f"checkpoint {self.path}" + (f" at {where}" if where else "")


@dataclass(frozen=True)
class Decision:
    action: Action
    lines: list[LogLine] = field(default_factory=list)  # new lines to show, up to a rule's match
    delay: float = 0.0  # WAIT: seconds before the next round (0: more lines are ready, read now)
    status: JobStatus | None = None
    message: str = ""  # FAIL: why; RESUBMIT: the preemption's reason
    retryable: bool = True  # FAIL: whether another try of the task may succeed
    cancel: bool = False  # the driver must stop the job now (a rule matched, the deadline passed)
    match: RuleMatch | None = None
    resume: ResumePoint | None = None  # RESUBMIT: where the next attempt resumes
    timed_out: bool = False  # FAIL: the deadline passed
    points: list[tuple[str, int, float]] = field(default_factory=list)  # new metric observations
    warnings: list[str] = field(default_factory=list)  # to log: ignored log content, outages
    events: list[str] = field(default_factory=list)  # to log: the job's state changes (and a waiting job's reason)

    def to_dict(self) -> dict[str, Any]:
        """A final step as JSON (a trigger event carries it): what the task needs to conclude."""
        return {"action": self.action.value, "message": self.message, "retryable": self.retryable,
                "timed_out": self.timed_out, "status": self.status.to_dict() if self.status else None,
                "match": self.match.to_dict() if self.match else None,
                "resume": self.resume.__dict__ if self.resume else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Decision:
        match = data.get("match")
        return cls(
            Action(data["action"]), message=data.get("message", ""), retryable=data.get("retryable", True),
            timed_out=data.get("timed_out", False),
            status=JobStatus.from_dict(data["status"]) if data.get("status") else None,
            match=RuleMatch(Verdict(match["verdict"]), match["pattern"], LogLine(match["source"], match["line"]))
            if match else None,
            resume=ResumePoint(**data["resume"]) if data.get("resume") else None,
        )


class Follower:
    """Decides, round by round, from what the driver read. Never sleeps or writes anything; reads only the
    symlinks of a reported local path (``confined``)."""

    def __init__(self, options: FollowOptions | None = None, state: dict[str, Any] | None = None):
        self.options = options or FollowOptions()
        self.rules = LogRules(**self.options.rules)
        state = dict(state or {})
        self.cursor = state.get("cursor")
        self.tracker = MetricsTracker(self.options.metric_goals, state=state.get("metrics"), confine=self._confined,
                                      refused=self._outside())
        self.preemptions: int = state.get("preemptions", 0)
        self.tail: list[list[str]] = state.get("tail", [])
        self.ended_at: float | None = state.get("ended_at")
        self.outage_since: float | None = state.get("outage_since")
        self.outage_failures: int = state.get("outage_failures", 0)
        self.seq: int = state.get("seq", 0)  # grows with every observed batch: newer state wins
        self.shown: list[str] | None = state.get("shown")  # the job's state (and reason) last logged
        self.waiting_since: float | None = state.get("waiting_since")  # waiting for admission since
        self.logged: int = state.get("logged", 0)  # job lines shown in the task log
        self.withheld: int = state.get("withheld", 0)  # job lines past ``task_log_lines``, not shown
        # a backend's count of settled units (JobStatus.progress): [first seen, when, last shown, when]
        self.progress: list[float] | None = state.get("progress")
        self.resources_at: float | None = state.get("resources_at")  # when the backend was last asked (resource_use)
        self.resources_off: str | None = state.get("resources_off")  # why it is asked no more
        self._notes: list[str] = []  # to log with the next round's warnings

    @property
    def state(self) -> dict[str, Any]:
        return {"cursor": self.cursor, "metrics": self.tracker.state(), "preemptions": self.preemptions,
                "tail": [list(entry) for entry in self.tail], "ended_at": self.ended_at,
                "outage_since": self.outage_since, "outage_failures": self.outage_failures, "seq": self.seq,
                "shown": self.shown, "waiting_since": self.waiting_since, "logged": self.logged,
                "withheld": self.withheld, "progress": self.progress, "resources_at": self.resources_at,
                "resources_off": self.resources_off}

    # -- rounds -----------------------------------------------------------------------------------------

    def round(self, status: JobStatus | Exception | None, batch: LogBatch | Exception | None, now: float) -> Decision:
        """One round from what a driver read: the job's status or the error reading it, then the next
        batch of lines or the error reading it (None: not followed, or not read after a status error).
        The one place that turns a read error into a step: a vanished job, a refusal, a backend that
        stayed unreachable, a log store outage."""
        if isinstance(status, JobNotFound):
            return self.vanished(str(status))
        if isinstance(status, BackendAccessError):
            return self.refused(str(status))
        if isinstance(status, Exception):  # the status stream gave up retrying
            return self.unreachable(f"{type(status).__name__}: {status}")
        if isinstance(batch, LogSourceUnavailable):
            return self.unavailable(str(batch), now)
        return self.observe(status, batch, now)

    def observe(self, status: JobStatus | None, batch: LogBatch | None, now: float) -> Decision:
        """One round: ``status`` read first (None when following a log alone), then ``batch`` (None
        when following a status alone). A terminal status followed by an empty read, at least
        ``settle_s`` after the job ended, means every line has been seen. Lines enter here, their control
        characters made visible (``logs.controls``) before rules, metrics, the tail or the task log see them."""
        warnings = self._recovered(now) + self._notes
        self._notes = []
        events = self._transition(status, now)
        lines, shown, points, match = [], [], [], None
        if batch is not None:
            self.seq += 1
            self.cursor = batch.cursor
            read = visible_lines(batch.lines)
            taken, match = self.rules.first_match(read)
            lines = read[:taken]
            points = self.tracker.feed_lines(lines, self.rules)
            warnings += self.tracker.warnings
            self.tracker.warnings.clear()
            self._keep_tail(lines)
            shown = self._to_show(lines, warnings)
        shown = shown + self._settled(status, now, points)
        progress = {"lines": shown, "status": status, "points": points, "warnings": warnings, "events": events}
        if match is not None:
            return self._verdict(match, progress)
        if (limit := self.options.max_queue_s) is not None and status is not None and self.waiting_since is not None \
                and now - self.waiting_since >= limit:
            return Decision(Action.FAIL, **progress, cancel=True, retryable=False,
                        message=f"the job was not admitted by its queue within max_queue_s ({limit:g} s); "
                                f"the queue's last reason: {status.message or 'none given'}")
        if self.options.deadline is not None and now >= self.options.deadline and not (status and status.ended):
            return Decision(Action.FAIL, **progress, cancel=True, timed_out=True,
                        message=f"the job did not finish by its deadline ({self.options.deadline - now:+.0f} s)")
        more = batch is not None and len(batch.lines) >= self.options.max_lines
        if more:
            return Decision(Action.WAIT, **progress, delay=0.0)
        if status is None or not status.ended:
            self.ended_at = None
            return Decision(Action.WAIT, **progress, delay=self.options.poll_interval)
        if self.ended_at is None:
            self.ended_at = now
        if batch is not None and (lines or now - self.ended_at < self.options.settle_s):
            delay = 0.0 if lines else self.ended_at + self.options.settle_s - now
            return Decision(Action.WAIT, **progress, delay=delay)
        return self._ended(status, progress)

    def resources_due(self, every_s: float | None, status: JobStatus | Exception | None, now: float) -> bool:
        """Whether to ask the backend what the job's workers use (``Backend.resource_use``) before this round: it
        can say (``every_s``, not refused before), the job runs, and ``every_s`` passed since the last time."""
        return (every_s is not None and self.resources_off is None and isinstance(status, JobStatus)
                and status.state is JobState.RUNNING
                and (self.resources_at is None or now - self.resources_at >= every_s))

    def resources(self, use: dict[str, Any] | ResourcesUnavailable | None, now: float, source: str) -> None:
        """What the backend answered (``resources_due``): the workers' use kept as the last sample (bounded, as a
        launcher's line is), or, where it never can answer, that said once in the view and the task log."""
        self.resources_at = now
        if isinstance(use, ResourcesUnavailable):
            self.resources_off = str(use)
            self.tracker.keep_resources({}, round(now, 1), source, note=self.resources_off)
            self._notes.append(f"Resource use not shown: {self.resources_off}")
        elif use is not None and not self.tracker.keep_resources(use, round(now, 1), source):
            self._notes.append(f"ignored a resources sample from {source} that breaks the bounds of one")

    def unavailable(self, error: str, now: float) -> Decision:
        """The log store could not be read: wait with backoff, fail (retryably) past the grace period."""
        if self.outage_since is None:
            self.outage_since = now
        self.outage_failures += 1
        elapsed = now - self.outage_since
        if elapsed > self.options.outage_grace_s:
            return Decision(Action.FAIL, message=f"the log store was unreadable for {elapsed:.0f} s, longer than the "
                                             f"{self.options.outage_grace_s:g} s grace period: {error}")
        delay = min(max(self.options.poll_interval, 1.0) * 2 ** (self.outage_failures - 1), 30.0)
        return Decision(Action.WAIT, delay=delay, warnings=[
            f"log store unavailable ({error}); retrying in {delay:.1f} s from the same position; the task "
            f"fails only if this lasts over {self.options.outage_grace_s:g} s"])

    def vanished(self, error: str) -> Decision:
        return Decision(Action.FAIL, message=f"the job vanished: {error}")

    def unreachable(self, error: str) -> Decision:
        """The backend stayed unreachable through its own retries: another try of the task may succeed."""
        return Decision(Action.FAIL, message=f"the backend could not be reached: {error}")

    def refused(self, error: str) -> Decision:
        """A permanent refusal by the backend (no permission, no such resource kind): retrying cannot help."""
        return Decision(Action.FAIL, message=f"the backend refused to report the job: {error}", retryable=False)

    def resubmitted(self, new_log: bool) -> None:
        """The driver started the preempted job again: its new attempt's end is still to come, and with
        ``new_log`` (see ``LogSource.restarts_with_job``) its log is read from the start."""
        self.ended_at = None
        if new_log:
            self.cursor = None

    # -- results ----------------------------------------------------------------------------------------

    @property
    def metrics(self) -> dict[str, Any]:
        return self.tracker.final

    @property
    def model_path(self) -> str | None:
        return self.tracker.model_path

    def last_lines(self) -> list[LogLine]:
        return [LogLine(source, text) for source, text in self.tail]

    def failure(self, message: str, last: int | None = None) -> str:
        """``message`` followed by the job's last log lines (the newest ``last`` of them), so that a failed
        task or trial shows why without a trip to the job's log."""
        lines = self.last_lines()[-last:] if last else self.last_lines()
        shown = "\n".join(f"  [{line.source}] {line.text}" for line in lines)
        return f"{message}. Last log lines:\n{shown}" if shown else message

    # -- internals --------------------------------------------------------------------------------------

    def _confined(self, path: str) -> str | None:
        """A path a line reports, resolved, if it lies within the job's artifact roots (see ``confined``)."""
        return confined(path, self.options.artifact_roots)

    def _keep_tail(self, lines: list[LogLine]) -> None:
        """The newest ``tail_lines`` lines, each cut short (once per batch: only its end can be kept)."""
        keep = max(self.options.tail_lines, 0)
        tail = self.tail + [[_cut(line.source, TAIL_SOURCE_CHARS), _cut(line.text, TAIL_LINE_CHARS)]
                            for line in lines[max(len(lines) - keep, 0):]]
        self.tail = tail[max(len(tail) - keep, 0):]

    def _settled(self, status: JobStatus | None, now: float, points: list) -> list[LogLine]:
        """A ``[backend] shards 4,210/10,000  ETA 41 min`` line and a ``shards_done`` point (added to ``points``)
        where the backend counts a job's settled shards itself (an Indexed Job: its status, not its pods' logs):
        when the count grew, at most every ``PROGRESS_S`` seconds, and at the last."""
        if status is None or status.progress is None:
            return []
        # here, not at the top: jobs.shards imports pydantic, which only such a job needs
        from airflow_ml_provider.jobs.shards import settled_line

        done, total = status.progress
        if self.progress is None:
            self.progress = [done, now, -1, 0.0]
        first, since, last, at = self.progress
        if done == last or (done < total and now - at < PROGRESS_S):
            return []
        self.progress = [first, since, done, now]
        points += self.tracker.record({"shards_done": float(done)}, "backend", step=done)
        return [LogLine("backend", settled_line(done, total, done - first, now - since))]

    def _to_show(self, lines: list[LogLine], warnings: list[str]) -> list[LogLine]:
        """The lines the task log still has room for (``task_log_lines``); the first time one is withheld, a
        warning says where the whole log is."""
        cap = self.options.task_log_lines
        if cap is None or self.logged + len(lines) <= cap:
            self.logged += len(lines)
            return lines
        room = max(cap - self.logged, 0)
        if self.withheld == 0:
            warnings.append(f"The task log shows the first {cap} lines of the job's log (task_log_lines); the "
                            f"rest are in {self.options.full_log or 'the job log source'}. Metrics and log rules "
                            "still read every line")
        self.logged += room
        self.withheld += len(lines) - room
        return lines[:room]

    def _outside(self) -> str:
        if not self.options.artifact_roots:
            return ("the job has no artifact directory to report one in (set the connection's artifact_root, or "
                    "the task's model_dir/checkpoint_dir)")
        return (f"it is outside the job's artifact directories {list(self.options.artifact_roots)} once resolved "
                "(symlinks, '..')")

    def _transition(self, status: JobStatus | None, now: float) -> list[str]:
        """A line for the log when the job's state changes, or a waiting job's reason does (Kueue's
        "insufficient quota" becoming another reason): each once, whatever the number of rounds."""
        if status is None:
            return []
        waiting = status.state is JobState.QUEUED or status.reason == REQUEUED
        self.waiting_since = (now if self.waiting_since is None else self.waiting_since) if waiting else None
        shown = [status.state.value, status.message if status.state in _REASONS_SHOWN or waiting else ""]
        if shown == self.shown:
            return []
        self.shown = shown
        return [f"Job is {status.state.value}" + (f": {status.message}" if status.message else "")]

    def _recovered(self, now: float) -> list[str]:
        if self.outage_since is None:
            return []
        lasted, self.outage_since, self.outage_failures = now - self.outage_since, None, 0
        return [f"log store reachable again after {lasted:.1f} s; continuing from the saved position"]

    def _verdict(self, match: RuleMatch, progress: dict) -> Decision:
        if match.verdict is Verdict.SUCCEED:
            return Decision(Action.FINISH, **progress, match=match)
        where = f"its log matched {match.verdict.value}_on {match.pattern!r}: [{match.line.source}] {match.line.text}"
        return Decision(Action.FAIL, **progress, match=match, cancel=True, message=where,
                    retryable=match.verdict is Verdict.RETRY)

    def _ended(self, status: JobStatus, progress: dict) -> Decision:
        if status.state is JobState.SUCCEEDED:
            return Decision(Action.FINISH, **progress)
        if status.state is JobState.PREEMPTED and self.preemptions < self.options.max_preemptions:
            self.preemptions += 1
            checkpoint = self.tracker.checkpoint
            resume = ResumePoint(checkpoint["path"], checkpoint.get("step"), checkpoint.get("epoch")) if checkpoint else None
            return Decision(Action.RESUBMIT, **progress, resume=resume, message=status.message or "no reason given")
        codes = ", ".join(f"rank {rank}: {code}" for rank, code in sorted(status.exit_codes.items()))
        reason = f"job {status.state.value}: {status.message or 'no reason given'} (exit codes: {codes or 'none recorded'})"
        if status.state is JobState.PREEMPTED:
            reason += f"; preempted {self.preemptions + 1} time(s), the most max_preemptions allows"
        return Decision(Action.FAIL, **progress, message=reason)


def _cut(text: str, chars: int) -> str:
    """``text``, or its first ``chars`` characters marked as cut."""
    return text if len(text) <= chars else f"{text[:chars]} [... {len(text) - chars} more characters]"


def confined(path: str, roots: tuple[str, ...] | list[str]) -> str | None:
    """``path`` resolved, if it lies inside one of ``roots`` (resolved the same way, bar their last component), else None.

    A local path is resolved by ``os.path.realpath`` (every symlink and ``..``, as the OS would open it:
    a symlink inside the root pointing at ``/etc/passwd`` resolves outside, and so does everything under a
    root that is itself a link); a URL (``s3://``, ``gs://``)
    keeps its scheme and bucket and has its key normalized (``..`` cannot leave the bucket). The
    resolved path is what the caller keeps and passes on, so what was checked is what is opened.
    """
    resolved = _resolve(path)
    if resolved is None:
        return None
    for root in roots:
        base = _resolve(root, root=True)
        if base is not None and (resolved == base or resolved.startswith(base.rstrip("/") + "/")):
            return resolved
    return None


def _resolve(path: str, root: bool = False) -> str | None:
    """An absolute local path's real path, or a URL with its scheme lower-cased and its key normalized;
    None for a relative path or a URL without a bucket. A ``root``'s own last component is not followed: a
    job may have made its directory a link (to ``$AIRFLOW_HOME``), and what lies there is not the job's."""
    scheme, sep, rest = path.partition("://")
    if sep:
        bucket, _, key = rest.partition("/")
        if not scheme or not bucket:
            return None
        return f"{scheme.lower()}://{bucket}/{posixpath.normpath('/' + key).lstrip('/')}"
    if not path.startswith("/"):
        return None
    if root:
        path = os.path.normpath(path)
        return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    return os.path.realpath(path)
