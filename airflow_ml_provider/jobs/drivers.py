"""The I/O around the follow core: a sync driver (operators, sensors in poke mode, the search's trials)
and an async one (triggers), shaped like lightkube's sync/async twins over one core. There is one
waiting loop, ``follow_async``: the sync driver's ``run()`` drives it in a private event loop, so a
task that blocks a worker notices the job's end as soon as a deferred one does.

A driver reads the status and the next lines, hands them to ``Follower.observe``, shows the lines it
returns, and does what the step says (cancel the job, wait). It decides nothing itself.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow_ml_provider.jobs.backends.base import (
    Backend,
    BackendAccessError,
    JobNotFound,
    ResourcesUnavailable,
)
from airflow_ml_provider.jobs.follow import Action, Decision, Follower, FollowOptions
from airflow_ml_provider.jobs.state import JobState
from airflow_ml_provider.logs.controls import visible_lines
from airflow_ml_provider.logs.display import format_line
from airflow_ml_provider.logs.source import LogLine, LogSource, LogSourceUnavailable

if TYPE_CHECKING:
    from airflow_ml_provider.jobs.spec import TrainingJobSpec
    from airflow_ml_provider.jobs.state import JobStatus


SHOWING = "showing"  # in a saved state: the batch being shown when it was saved (lines, cursor before it)
AGAIN = "(again) "  # labels a line shown again after a restart: it may already be above


def job_options(base: FollowOptions, backend: Backend, name: str, spec: TrainingJobSpec,
                source: LogSource) -> FollowOptions:
    """``base`` for one job just submitted (a training task's, a search trial's): the directories it may
    report its model and checkpoints in (a path elsewhere, from a pod, is not trusted), how long its
    log settles after it ends, where the whole log is, and its deadline, ``spec.timeout_s`` from now."""
    roots = tuple(path for path in (backend.default_artifact_dir(name), spec.model_dir, spec.checkpoint_dir) if path)
    deadline = time.time() + spec.timeout_s if spec.timeout_s else None
    return replace(base, artifact_roots=roots, settle_s=source.settle_s, deadline=deadline, full_log=source.location())


class SyncDriver:
    """Follows one job (``backend`` + ``name``), one log (``source``), or both, synchronously.

    ``poll()`` does one round without sleeping, so one thread can follow many jobs (the search);
    ``run()`` follows until the follower decides, through ``follow_async``. With ``owns_job`` the
    driver heartbeats the job and cancels it when a step says so; a sensor watching another task's
    job passes ``owns_job=False`` and never touches it.
    """

    def __init__(self, follower: Follower, log: logging.Logger, backend: Backend | None = None,
                 name: str | None = None, source: LogSource | None = None, owns_job: bool = True,
                 clock: Callable[[], float] = time.time, on_step: Callable[[Decision], None] | None = None):
        self.follower, self.log, self.backend, self.name = follower, log, backend, name
        self.source, self.owns_job, self.clock, self.on_step = source, owns_job, clock, on_step

    def poll(self) -> Decision:
        """One round, without sleeping."""
        status = batch = None
        if self.backend is not None:
            if self.owns_job:
                self.backend.heartbeat(self.name)
            try:
                status = self.backend.status(self.name)
            except (JobNotFound, BackendAccessError) as exc:
                status = exc
            if self.owns_job and self.follower.resources_due(self.backend.resources_every_s, status, self.clock()):
                _sample(self.follower, self.backend, self.name, self.clock, self.log)  # a search trial's, for its view
        if self.source is not None and _has_log(status):
            try:
                batch = self.source.read(self.follower.cursor, self.follower.options.max_lines)
            except LogSourceUnavailable as exc:
                batch = exc
        return self._act(self.follower.round(status, batch, self.clock()))

    def poll_ready(self) -> Decision:
        """Rounds without sleeping while more lines are ready: the first step that waits or decides."""
        while (step := self.poll()).action is Action.WAIT and step.delay == 0:
            pass
        return step

    def run(self) -> Decision:
        """Follow until the follower decides; returns its final step (never WAIT). Not from a thread
        that is running an event loop (await ``follow_async`` there)."""
        return asyncio.run(follow_async(self.follower, self.log, self.backend, self.name, self.source,
                                        self.owns_job, clock=self.clock, on_step=self.on_step))

    def _act(self, step: Decision) -> Decision:
        if _report(step, self.log, self.on_step, self.backend, self.name, self.owns_job):
            self.backend.cancel(self.name)
        return step


def _has_log(status: JobStatus | Exception | None) -> bool:
    """Whether to read the job's log this round: not after a status error, nor while the job waits for
    admission (QUEUED: its queue keeps it suspended, so it has no pods; a thousand queued jobs read nothing)."""
    return not isinstance(status, Exception) and not (status is not None and status.state is JobState.QUEUED)


def _report(step: Decision, log: logging.Logger, on_step: Callable[[Decision], None] | None, backend: Backend | None,
            name: str | None, owns_job: bool) -> bool:
    """What both drivers do with a step before their own I/O: show its warnings and lines, hand it to
    ``on_step`` (e.g. observability.JobMetrics); True when the driver must now cancel its own job."""
    for warning in step.warnings:
        log.warning("%s", warning)
    for event in step.events:
        log.info("%s", event)
    for line in step.lines:
        log.info("%s", format_line(line))
    if on_step is not None:
        on_step(step)
    if not (step.cancel and owns_job and backend is not None):
        return False
    log.warning("Stopping job %s: %s", name, step.message)
    return True


async def follow_async(follower: Follower, log: logging.Logger, backend: Backend | None = None,
                       name: str | None = None, source: LogSource | None = None, owns_job: bool = True,
                       on_progress: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
                       clock: Callable[[], float] = time.time,
                       on_step: Callable[[Decision], None] | None = None) -> Decision:
    """Follow until the follower decides; returns its final step (never WAIT).

    Statuses come from ``backend.statuses()`` (the shared watch on Kubernetes, polling elsewhere),
    pumped in the background so that a change wakes the loop at once. ``on_progress`` gets the
    follower's state before a round's lines are shown, with them marked as being shown (``SHOWING``:
    write-ahead), and again in the next round, which confirms them. The trigger makes it durable, so
    a process that dies between saving and showing can have ``show_again`` show that batch again,
    labelled: no line is lost, and none repeats unlabelled. The final step's batch is confirmed before this
    returns. (A trigger cancelled while its triggerer shuts down does not confirm its last batch: the triggerer's comms are closed by then, and a save
    would block its shutdown. A restart shows that batch again, labelled.)
    """
    latest: dict[str, Any] = {}
    changed = asyncio.Event()

    async def pump() -> None:
        try:
            async for status in backend.statuses(name, follower.options.poll_interval):
                latest["status"] = status
                changed.set()
        except Exception as exc:  # noqa: BLE001 - handed to the loop, which decides or re-raises
            latest["error"] = exc
            changed.set()

    pumping = asyncio.create_task(pump(), name=f"statuses of {name}") if backend is not None else None
    unconfirmed = False  # lines shown whose saved state still says "being shown"
    try:
        if pumping is not None:
            await changed.wait()
        while True:
            changed.clear()
            before, sample = follower.cursor, follower.tracker.resources
            step = await _round(follower, backend, name, source, owns_job, latest, clock, log)
            # (a new resources sample is saved too: a deferred task's view reads it from there, at most every 15 s)
            if on_progress is not None and (step.lines or unconfirmed or follower.tracker.resources is not sample):
                state = follower.state
                if step.lines:
                    state[SHOWING] = _showing(step.lines, follower, before)
                await on_progress(state)
                unconfirmed = bool(step.lines)
            report = functools.partial(_report, step, log, on_step, backend, name, owns_job)
            # (off the loop's thread when there is a hook: the training view's XCom push is a sync call of the
            # task's comms, which Airflow 3.3 refuses on a loop's thread whenever another call holds the comms
            # lock, DeadlockImminentError, seen failing a sync MPIJob task that had succeeded)
            if await asyncio.to_thread(report) if on_step is not None else report():
                await asyncio.to_thread(backend.cancel, name)
            if step.action is not Action.WAIT:
                if on_progress is not None and unconfirmed:
                    # The last batch confirmed before the caller's event: a restart does not show it again, and in a
                    # triggerer its lines have reached the supervisor first. Their records go over the log socket,
                    # this save over the request socket, and a trigger's end drops its log file (Airflow 3.3
                    # jobs/triggerer_job_runner.py, _handle_request: logger_cache.pop for each finished trigger):
                    # lines still unread by then went to the triggerer's own log, not the task's.
                    await on_progress(follower.state)
                return step
            if step.delay > 0:
                try:
                    await asyncio.wait_for(changed.wait(), step.delay)
                except asyncio.TimeoutError:
                    pass
    finally:
        if pumping is not None:
            pumping.cancel()


def _sample(follower: Follower, backend: Backend, name: str, clock: Callable[[], float], log: logging.Logger) -> None:
    """Hand the follower what ``backend.resource_use(name)`` says (a due sample: ``Follower.resources_due``), its
    refusal included; any other failure is no sample this time, never the job's."""
    try:
        use = backend.resource_use(name)
    except ResourcesUnavailable as exc:
        use = exc
    except Exception as exc:  # noqa: BLE001 - what the workers use is never worth failing the job for
        log.debug("No resources sample of job %s this time: %s", name, exc)
        use = None
    follower.resources(use, clock(), backend.resources_from or backend.name)


def _showing(lines: list, follower: Follower, before: Any) -> dict[str, Any]:
    """The mark of a batch being shown: its length, and where it starts only if the saved tail cannot
    show it again (a log cursor, such as Elasticsearch's, can be the largest part of the state; the tail
    ends with the batch's last line unless the task log cap withheld some of it)."""
    if len(lines) <= len(follower.tail) and not follower.withheld:
        return {"lines": len(lines)}
    return {"lines": len(lines), "cursor": before}


async def _round(follower: Follower, backend: Backend | None, name: str | None, source: LogSource | None,
                 owns_job: bool, latest: dict[str, Any], clock: Callable[[], float], log: logging.Logger) -> Decision:
    status, batch = latest.get("error") or latest.get("status"), None
    if isinstance(status, Exception):
        return follower.round(status, None, clock())
    if backend is not None and owns_job:
        await asyncio.to_thread(backend.heartbeat, name)
        # what the workers use, for the task's view (its own job's: a sensor watches another task's, shown there)
        if follower.resources_due(backend.resources_every_s, status, clock()):
            await asyncio.to_thread(_sample, follower, backend, name, clock, log)
    if source is not None and _has_log(status):
        try:
            batch = await asyncio.to_thread(source.read, follower.cursor, follower.options.max_lines)
        except LogSourceUnavailable as exc:
            batch = exc
    return follower.round(status, batch, clock())


async def show_again(state: dict[str, Any], source: LogSource | None, log: logging.Logger) -> dict[str, Any]:
    """After a restart: the lines a saved ``state`` was showing when its process died (see
    ``follow_async``), shown again and labelled ``AGAIN``, since some may already be above; returns the
    state without the mark."""
    state = dict(state)
    showing = state.pop(SHOWING, None)
    if not showing:
        return state
    count = showing["lines"]
    try:
        lines = await _batch_shown(state, showing, source)
    except LogSourceUnavailable as exc:
        log.warning("Could not show again the %d lines being shown when the previous triggerer stopped (%s): "
                    "some of them may be missing above", count, exc)
        return state
    log.info("The previous triggerer stopped while showing the next %d lines: shown again, labelled %r "
             "(some may already be above)", count, AGAIN.strip())
    for line in lines:
        log.info("%s%s", AGAIN, format_line(line))
    return state


async def _batch_shown(state: dict[str, Any], showing: dict[str, Any], source: LogSource | None) -> list[LogLine]:
    """A batch that fits in the saved tail (``tail_lines``, 20) comes from it: the same lines whatever the
    source. A longer one is read again from its start: the same lines for files and pod logs (from
    Elasticsearch, unless lines shipped late since then took places in it)."""
    count, tail = showing["lines"], state.get("tail") or []
    if count <= len(tail):
        return [LogLine(name, text) for name, text in tail[-count:]]
    if source is None or "cursor" not in showing:
        raise LogSourceUnavailable("the state's tail is shorter than the batch, and there is no log to read it from")
    return visible_lines((await asyncio.to_thread(source.read, showing["cursor"], count)).lines[:count])


def replay(source: LogSource, options: FollowOptions | None = None) -> Follower:
    """Feed a finished job's whole log through a follower: its metrics, model path and last lines
    (for reading another task's job, e.g. the training curve an evaluation plots)."""
    follower = Follower(options)
    while (batch := source.read(follower.cursor, follower.options.max_lines)).lines:
        follower.observe(None, batch, time.time())
    return follower
