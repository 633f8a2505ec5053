"""The ask/tell loop: trials become training jobs on a backend, at most ``max_parallel`` at a time.

Every trial's job has a deterministic name (the search task's identity plus the trial number), and the
study lives in a durable storage (a journal file by default), so a restarted search re-attaches to the
jobs of the trials that were running, keeps every finished trial, and only asks the sampler for the rest
of the budget. The loop is a series of non-blocking rounds (``advance``), so a worker runs it to the end
(``run``) and a trigger runs it in bounded slices on a thread, yielding to the event loop in between.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from airflow_ml_provider import labels
from airflow_ml_provider.jobs.backends.base import Backend, JobNotFound, JobSubmissionError
from airflow_ml_provider.jobs.drivers import SyncDriver, job_options
from airflow_ml_provider.jobs.follow import Action, Decision, Follower, FollowOptions
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.preemption import resubmit
from airflow_ml_provider.jobs.spec import SpecError, TrainingJobSpec
from airflow_ml_provider.jobs.state import NEVER_LAUNCHED, JobState, JobStatus
from airflow_ml_provider.logs.source import LogSource
from airflow_ml_provider.search.space import SearchSettings, SearchSpace, trial_budget
from airflow_ml_provider.search.template import render_trial

TrialTemplate = Callable[[str], TrainingJobSpec]  # job name -> the spec, placeholders still in it
# (number, job name, spec, follower) -> the trial's job view: an ``on_step`` hook with an ``end()`` (reporting.live_view)
TrialView = Callable[[int, str, TrainingJobSpec, Follower], Any]
JOB_NAME_ATTR = "job_name"
FAILURE_ATTR = "failure"
MODEL_PATH_ATTR = "model_path"


class SearchFailed(RuntimeError):
    """No trial completed: the objective could not be measured for any parameters."""


def trial_identity(search: JobIdentity, number: int) -> JobIdentity:
    """The identity of one trial's job, derived from the search task's, so its name is stable."""
    return replace(search, trial=number)


@dataclass
class _Running:
    trial: optuna.Trial
    job_name: str
    spec: TrainingJobSpec
    labels: dict[str, str]
    driver: SyncDriver
    reported: set[int]
    view: Any = None


class TrialScheduler:
    """Runs one search to its budget.

    Args:
        backend: where trial jobs run.
        study: the (persisted) Optuna study; its sampler and pruner drive the search.
        space: the validated search space.
        settings: budget, parallelism, objective and pruning settings.
        template: builds a trial's job spec (with placeholders) from the job's name.
        identity: the search task's identity; trial job names and labels derive from it.
        on_trial_finished: called with every trial this session finishes (tracking, progress).
        log: where trial events are logged.
        follow: how each trial's job is followed (log rules such as ``fail_on``, ``max_preemptions``);
            the objective's metric patterns are added to its rules.
        submit_kwargs: extra arguments of every ``Backend.submit`` (``JobEnvironment.submit_kwargs``: the
            local backend's explicit secrets for the artifact root); held in memory only.
        trial_view: builds the view of each trial's job (what the training view's trial page shows), called at
            every step of its follower and ended with the trial.
    """

    def __init__(self, backend: Backend, study: optuna.Study, space: SearchSpace, settings: SearchSettings,
                 template: TrialTemplate, identity: JobIdentity, *,
                 on_trial_finished: Callable[[FrozenTrial], None] | None = None,
                 log: logging.Logger | None = None, follow: FollowOptions | None = None,
                 submit_kwargs: dict[str, Any] | None = None, log_source: Callable[[str], LogSource] | None = None,
                 trial_view: TrialView | None = None):
        self.backend = backend
        self.trial_view = trial_view
        self.log_source = log_source or backend.log_source  # a trial's log: where its task's would be read
        self.study = study
        self.space = space
        self.settings = settings
        self.template = template
        self.identity = identity
        self.on_trial_finished = on_trial_finished
        self.submit_kwargs = submit_kwargs or {}
        self.log = log or logging.getLogger(__name__)
        self.budget = trial_budget(settings, space)
        self.running: dict[int, _Running] = {}
        self.finished = False  # the budget is spent (or the search gave up) and no trial runs
        self._failures_in_a_row = 0
        self._asked: int | None = None  # trials in the study, counted once and then kept up to date
        self._relaunched: set[int] = set()  # trials whose never-launched job was submitted again
        self._best: float | None = None  # the best objective so far, once a trial completed
        follow = follow or FollowOptions()
        rules = {**follow.rules, "metrics": [*follow.rules.get("metrics", []), *(settings.metric_patterns or [])]}
        self.follow = replace(follow, rules=rules, poll_interval=settings.poll_interval)

    def run(self) -> None:
        """Resume what a previous session left, then keep ``max_parallel`` trials running until the
        budget is spent. A systematic error (a bad data path, a broken image) fails every trial, so after
        ``max(3, max_parallel)`` failures in a row the search stops asking instead of spending its budget.
        If the loop raises (the study's storage fails, the task times out), ``stop`` cancels every running
        trial's job before the error goes on."""
        try:
            self.start()
            while not self.finished:
                if not self.advance(math.inf):
                    time.sleep(self.settings.poll_interval)
        except BaseException as exc:  # a failure, a timeout or a kill: no trial job may outlive the search
            self.stop(f"{type(exc).__name__}: {exc}")
            raise

    def start(self) -> None:
        """Delete the jobs of pruned trials and re-attach to those of running ones (a restarted search)."""
        self._resume()

    def advance(self, max_s: float) -> bool:
        """Rounds (fill the free slots, poll every running trial once) while they make progress, for up to
        ``max_s`` seconds; never sleeps. Returns whether the last round did anything: False means wait
        ``poll_interval`` before the next call. Sets ``finished`` once nothing is left to run."""
        until = time.monotonic() + max_s
        while True:
            self._fill()
            if not self.running:
                self.finished = True
                return False
            busy = any([self._poll(run) for run in list(self.running.values())])
            if not busy or time.monotonic() >= until:
                return busy

    def cancel_running(self) -> None:
        """Cancel the job of every running trial (the task is being killed): those this session follows
        and those the study records as running (a session that has not re-attached to them yet)."""
        stored = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        for name in {run.job_name for run in self.running.values()} | {self._job_name(t.number) for t in stored}:
            self.backend.cancel(name)

    def stop(self, reason: str) -> None:
        """The search failed: cancel the job of every running trial (those followed, and those the study
        records as running), then record those trials as failed with ``reason``, so that no job outlives
        the search and a retry of the task asks for new trials instead of re-attaching to cancelled jobs.
        Each step is tried on its own, cancelling first: the failure may be the study's storage itself."""
        numbers = {number: run.job_name for number, run in self.running.items()}
        try:
            stored = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            numbers.update({t.number: self._job_name(t.number) for t in stored if t.number not in numbers})
        except Exception as exc:  # noqa: BLE001 - the followed trials are still cancelled
            self.log.warning("The study's running trials could not be read (%s): cancelling the %d followed",
                             exc, len(numbers))
            stored = []
        for name in sorted(numbers.values()):
            try:
                self.backend.cancel(name)
            except Exception as exc:  # noqa: BLE001 - go on cancelling the others
                self.log.warning("Could not cancel trial job %s: %s", name, exc)
        self.log.warning("The search stopped (%s): cancelled the jobs of %d running trial(s) %s", reason,
                         len(numbers), sorted(numbers))
        trials = {**{t.number: t._trial_id for t in stored}, **{n: r.trial._trial_id for n, r in self.running.items()}}
        self.running.clear()
        self.finished = True
        for number, trial_id in sorted(trials.items()):
            try:
                trial = optuna.Trial(self.study, trial_id)
                trial.set_user_attr(FAILURE_ATTR, f"the search stopped: {reason}"[:2000])
                self.study.tell(trial, state=TrialState.FAIL)
            except Exception as exc:  # noqa: BLE001 - the storage may be what failed
                self.log.warning("Trial %d could not be recorded as failed: %s", number, exc)

    def _resume(self) -> None:
        for frozen in self.study.get_trials(deepcopy=False, states=(TrialState.PRUNED,)):
            self.backend.delete(frozen.user_attrs.get(JOB_NAME_ATTR) or self._job_name(frozen.number))
        for frozen in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            trial = optuna.Trial(self.study, frozen._trial_id)
            name = self._job_name(frozen.number)
            try:
                status = self.backend.status(name)
            except JobNotFound:
                status = None
            if status is None or _never_launched(status):  # the previous session died before or while
                self._start(trial, self.space.suggest(trial))  # submitting: drawn values kept, missing drawn
                continue
            self.log.info("Trial %d: re-attached to its job %s (%s)", frozen.number, name, status.state.value)
            spec = render_trial(self.template(name), self.space.suggest(trial))  # the values it drew
            self._track(trial, name, spec, self._labels(trial.number), reported=set(frozen.intermediate_values))

    def _fill(self) -> None:
        """One ask per free slot, while the budget lasts."""
        if self._asked is None:
            self._asked = len(self.study.get_trials(deepcopy=False))
        while (len(self.running) < self.settings.max_parallel and self._asked < self.budget
               and self._failures_in_a_row < max(3, self.settings.max_parallel)):
            trial = self.study.ask()
            self._asked += 1
            self._start(trial, self.space.suggest(trial))

    def _start(self, trial: optuna.Trial, values: dict) -> None:
        name = self._job_name(trial.number)
        trial.set_user_attr(JOB_NAME_ATTR, name)
        labels = self._labels(trial.number)
        try:
            spec = render_trial(self.template(name), values)
            started = self.backend.submit(name, spec, labels, **self.submit_kwargs)
        except (SpecError, JobSubmissionError) as exc:
            self._fail(trial, f"its job was not submitted: {exc}")
            return
        self.log.info("Trial %d: %s job %s with %s", trial.number, "submitted" if started else "attached to",
                      name, values)
        self._track(trial, name, spec, labels, reported=set())

    def _labels(self, number: int) -> dict[str, str]:
        return {**trial_identity(self.identity, number).labels(),
                labels.SEARCH: self.identity.name, labels.TRIAL: str(number)}

    def _track(self, trial: optuna.Trial, name: str, spec: TrainingJobSpec, labels: dict[str, str],
               reported: set[int]) -> None:
        source = self.log_source(name)
        options = job_options(self.follow, self.backend, name, spec, source)
        follower = Follower(options)
        view = self.trial_view(trial.number, name, spec, follower) if self.trial_view else None
        driver = SyncDriver(follower, self.log, self.backend, name, source, on_step=view)
        self.running[trial.number] = _Running(trial, name, spec, labels, driver, reported, view)

    def _poll(self, run: _Running) -> bool:
        """One round of the trial's job through the follow core; True when the trial changed state or more
        of its log is ready at once. Lines of a running job are read every ``poll_interval``, not in a
        busy loop: a trigger following 64 chatty trials must not spin a core."""
        step = run.driver.poll()
        if self._report(run, step):
            return True
        if step.action is Action.RESUBMIT:
            self._resubmit(run, step)
            return True
        if step.action is Action.FINISH:
            self._complete(run)
            return True
        if step.action is Action.FAIL:
            self._end(run)
            if not self._submitted_again_if_never_launched(run):
                self._fail(run.trial, run.driver.follower.failure(step.message, last=5))
            return True
        return step.delay == 0  # more is ready now (a full batch, the end of a log); new lines alone wait

    def _submitted_again_if_never_launched(self, run: _Running) -> bool:
        """A re-attached job that its dying submitter's launcher had not yet marked never launched (it still
        said "launching" when this session resumed) ends so only now: nothing of it ran, so the trial's job
        is started again, once, as ``_resume`` does for the ones already marked; True when it was."""
        if run.trial.number in self._relaunched:
            return False
        try:
            status = self.backend.status(run.job_name)
        except JobNotFound:
            return False
        if not _never_launched(status):
            return False
        self._relaunched.add(run.trial.number)
        self.log.warning("Trial %d: job %s was never launched (its submitter died mid-submit): submitting it again",
                         run.trial.number, run.job_name)
        self._start(run.trial, self.space.suggest(run.trial))  # the values it drew
        return True

    def _resubmit(self, run: _Running, step: Decision) -> None:
        """A preempted trial starts again under its name, from its last checkpoint (no new trial is spent)."""
        follower = run.driver.follower
        self.log.warning("Trial %d: job %s was preempted (%s); resubmitting it (preemption %d), resuming from %s",
                         run.trial.number, run.job_name, step.message, follower.preemptions,
                         step.resume.describe() if step.resume else "its checkpoint directory")
        try:
            resubmit(self.backend, run.job_name, run.spec, run.labels, follower, step.resume,
                     run.driver.source.restarts_with_job, **self.submit_kwargs)
        except JobSubmissionError as exc:
            self._end(run)
            self._fail(run.trial, f"its preempted job was not resubmitted: {exc}")

    def _report(self, run: _Running, step: Decision) -> bool:
        """Report the new steps to the trial, then ask the pruner; True when the trial was pruned.

        The decision depends on the reported values alone, not on whether the job happens to have
        finished when its lines were read, so a search with one trial at a time prunes reproducibly.
        """
        new = [(number, value) for name, number, value in step.points
               if name == self.settings.objective_metric and number not in run.reported]
        for number, value in new:
            run.trial.report(value, number)
            run.reported.add(number)
        if not new or not run.trial.should_prune():
            return False
        self._end(run)
        frozen = self.study.tell(run.trial, state=TrialState.PRUNED)
        self.backend.delete(run.job_name)  # after tell: a restart deletes the jobs of pruned trials again
        self.log.info("Trial %d: pruned at step %d (%s %.6g, below the median); job %s deleted",
                      run.trial.number, new[-1][0], self.settings.objective_metric, new[-1][1], run.job_name)
        self._failures_in_a_row = 0
        self._finished(frozen)
        return True

    def _complete(self, run: _Running) -> None:
        self._end(run)
        follower = run.driver.follower
        value = _number(follower.metrics.get(self.settings.objective_metric))
        if value is None:
            self._fail(run.trial, f"its job never reported {self.settings.objective_metric!r}")
            return
        if follower.model_path:
            run.trial.set_user_attr(MODEL_PATH_ATTR, follower.model_path)
        frozen = self.study.tell(run.trial, value)
        self.log.info("Trial %d: %s = %.6g (best so far %.6g)", run.trial.number,
                      self.settings.objective_metric, value, self._best_so_far(value))
        self._failures_in_a_row = 0
        self._finished(frozen)

    def _best_so_far(self, value: float) -> float:
        """The best objective including ``value``, kept as trials complete (asking the study each time
        reads every trial: quadratic over a long search)."""
        if self._best is None:
            complete = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            self._best = value if len(complete) <= 1 else self.study.best_value
        pick = max if self.settings.direction == "maximize" else min
        self._best = pick(self._best, value)
        return self._best

    def _fail(self, trial: optuna.Trial, reason: str) -> None:
        trial.set_user_attr(FAILURE_ATTR, reason[:2000])
        frozen = self.study.tell(trial, state=TrialState.FAIL)
        self.log.warning("Trial %d failed: %s", trial.number, reason)
        self._failures_in_a_row += 1
        self._finished(frozen)

    def _end(self, run: _Running) -> None:
        self.running.pop(run.trial.number, None)
        if run.view is not None:
            run.view.end()

    def _finished(self, frozen: FrozenTrial) -> None:
        if self.on_trial_finished is not None:
            self.on_trial_finished(frozen)

    def _job_name(self, number: int) -> str:
        return trial_identity(self.identity, number).name


def _never_launched(status: JobStatus) -> bool:
    """A job whose submitter was killed mid-submit (the local backend says so): nothing ran, so the
    trial's job is submitted again rather than failed."""
    return status.state is JobState.FAILED and status.reason == NEVER_LAUNCHED


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def trial_table(trials: list[FrozenTrial]) -> list[dict]:
    """Each trial as the summary and the training view list it: number, state, value, parameters, job."""
    return [{"number": t.number, "state": t.state.name, "value": t.value, "params": t.params,
             "job_name": t.user_attrs.get(JOB_NAME_ATTR)} for t in trials]


def summarize(study: optuna.Study) -> dict:
    """Best parameters and value, plus a small table of every trial (JSON-serializable, for XCom).

    Raises:
        SearchFailed: no trial completed.
    """
    trials = study.get_trials(deepcopy=False)
    table = trial_table(trials)
    completed = [t for t in trials if t.state is TrialState.COMPLETE]
    if not completed:
        reasons = sorted({t.user_attrs.get(FAILURE_ATTR, "") for t in trials if t.state is TrialState.FAIL})
        raise SearchFailed(f"no trial of study {study.study_name!r} completed ({len(trials)} trials). "
                           f"Failures: {'; '.join(reasons)[:4000] or 'none recorded'}")
    best = study.best_trial
    counts = {state: sum(t.state is state for t in trials) for state in TrialState}
    return {
        "best_params": best.params,
        "best_value": best.value,
        "best_trial": best.number,
        "best_job_name": best.user_attrs.get(JOB_NAME_ATTR),
        "best_model_path": best.user_attrs.get(MODEL_PATH_ATTR),
        "n_complete": counts[TrialState.COMPLETE],
        "n_pruned": counts[TrialState.PRUNED],
        "n_failed": counts[TrialState.FAIL],
        "trials": table,
    }
