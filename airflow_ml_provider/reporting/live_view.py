"""What the training view (``plugins.training_view``) shows of a job while its task follows it here (not
deferred): the follow core's own state, saved as the task instance's XCom ``ml_training_view`` at most every few
seconds and at every change of the job's state, never by reading the log again. A deferred task's trigger saves
the follow core's state itself (``ml_follow_state``), which the view reads instead. A search keeps each trial's job's
view the same way, as the XCom ``ml_trial_view_<number>`` of its task instance (``trial_views``)."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from airflow_ml_provider import xcom_keys

SAVE_EVERY_S = 3.0
TRIAL_SAVE_EVERY_S = 15.0  # a search follows up to 64 trials at once: a write per trial every 15 s, and at its end
TIMELINE = 50  # state changes kept
TAIL = 20  # workers' last lines kept
_TOTAL_FLAGS = re.compile(r"--(num-boost-round|epochs|steps)(?:=(\d+))?$")

log = logging.getLogger(__name__)


def planned_total(command: Sequence[str]) -> dict[str, Any] | None:
    """How many rounds, epochs or steps the job's command asks for (the bundled trainers' flags), or None."""
    for i, word in enumerate(command):
        match = _TOTAL_FLAGS.match(str(word))
        value = match and (match[2] or (command[i + 1] if i + 1 < len(command) else None))
        if match and str(value).isdigit():
            unit = {"num-boost-round": "round", "epochs": "epoch", "steps": "step"}[match[1]]
            return {"unit": unit, "total": int(value)}
    return None


def job_plan(spec) -> dict[str, Any] | None:
    """What the view's progress counts: a sharded job's shards (its launcher's metrics step is the shards settled),
    else the rounds, epochs or steps its command asks for."""
    if spec.shards is not None:
        return {"unit": "shard", "total": spec.shards.count}
    return planned_total(spec.command)


class LiveView:
    """An ``on_step`` hook of the sync driver: keeps the job's timeline and saves the view's snapshot."""

    def __init__(self, ti, job: str, backend: str, follower, plan: dict[str, Any] | None,
                 every_s: float = SAVE_EVERY_S, clock: Callable[[], float] = time.time,
                 tensorboard_dir: str | None = None, key: str = xcom_keys.TRAINING_VIEW):
        self.ti, self.job, self.backend, self.follower, self.plan = ti, job, backend, follower, plan
        self.key = key  # the XCom it is saved as
        self.tensorboard_dir = tensorboard_dir  # the job's AIRFLOW_ML_TENSORBOARD_DIR, whose scalars the view reads
        self.every_s, self.clock = every_s, clock
        self.timeline: list[list[Any]] = []
        self.started: float | None = None  # when the first metric point came
        self.saved = 0.0
        self.state: str | None = None

    def __call__(self, step) -> None:
        try:
            self._record(step)
        except Exception as exc:  # noqa: BLE001 - the view must never break following the job
            log.warning("Could not save the training view of job %s: %s", self.job, exc)

    def _record(self, step) -> None:
        now = self.clock()
        status = getattr(step, "status", None)
        changed = status is not None and status.state.value != self.state
        if changed:
            self.state = status.state.value
        for event in getattr(step, "events", ()):
            self.timeline = (self.timeline + [[now, event]])[-TIMELINE:]
        if getattr(step, "points", None) and self.started is None:
            self.started = now
        if changed or now - self.saved >= self.every_s:
            self.save(now)

    def save(self, now: float | None = None) -> None:
        self.saved = self.clock() if now is None else now
        self.ti.xcom_push(self.key, self.snapshot(self.saved))

    def end(self) -> None:
        """Save the snapshot now: a trial's end, which a pruned trial's job state does not mark."""
        try:
            self.save()
        except Exception as exc:  # noqa: BLE001 - the view must never break the search
            log.warning("Could not save the training view of job %s: %s", self.job, exc)

    def snapshot(self, now: float) -> dict[str, Any]:
        state = self.follower.state
        return {"job": self.job, "backend": self.backend, "state": self.state, "updated": now,
                "started": self.started, "plan": self.plan, "timeline": self.timeline,
                "metrics": state["metrics"].get("metrics", {}), "others": state["metrics"].get("others", {}),
                "resources": state["metrics"].get("resources"),
                "tail": state["tail"][-TAIL:], "tensorboard_dir": self.tensorboard_dir,
                "preemptions": state["preemptions"]}


def trial_views(ti, backend: str) -> Callable[..., LiveView]:
    """The search's ``trial_view`` factory (``search.runner.TrialScheduler``): each trial's job followed with a
    LiveView saved as ``xcom_keys.trial_view(number)`` of the search's task instance ``ti`` (anything with
    ``xcom_push``), every ``TRIAL_SAVE_EVERY_S`` and at every change of the job's state."""
    from airflow_ml_provider.artifact_layout import tensorboard_dir

    def view(number: int, job: str, spec, follower) -> LiveView:
        return LiveView(ti, job, backend, follower, job_plan(spec), every_s=TRIAL_SAVE_EVERY_S,
                        tensorboard_dir=tensorboard_dir(spec.checkpoint_dir), key=xcom_keys.trial_view(number))

    return view


def both(*hooks: Callable[[Any], None]) -> Callable[[Any], None]:
    """One ``on_step`` hook calling each of ``hooks``."""

    def call(step) -> None:
        for hook in hooks:
            hook(step)

    return call
