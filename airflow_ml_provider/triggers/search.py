"""Runs a hyperparameter search in the triggerer: ask/tell and every trial's job, no worker slot held."""

from __future__ import annotations

import asyncio
from typing import Any

from airflow.triggers.base import TriggerEvent

from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.triggers.serialized import SerializedTrigger

SLICE_S = 1.0  # longest stretch of search rounds on a thread before the trigger yields to the event loop


class SearchTrigger(SerializedTrigger):
    """Drives ``TrialScheduler`` to the search's budget and fires once: ``{"status": "done"}`` or
    ``{"status": "error", "message": ...}`` (after cancelling every running trial's job: ``stop``). The scheduler's rounds never sleep; they run on a thread in
    slices of at most ``SLICE_S`` seconds, and the trigger waits ``poll_interval`` between idle rounds
    on the event loop, so neither the triggerer's loop nor a worker slot is held while trials run.

    Nothing lives only in this trigger: finished trials are in the study's storage (a journal file by
    default), and a running trial's job has a deterministic name, so a trigger restarted by another
    triggerer process (rebuilt from these same arguments) keeps every finished trial, re-attaches to
    the running trials' jobs and asks only for the rest of the budget.

    Args:
        study_name: the study, in ``storage_url`` (``journal:///path`` or an SQLAlchemy URL).
        settings: the validated SearchSettings, as a dict; ``search_space`` the space as given.
        trial_spec: the trial job's template as JSON data (see ``search.template.spec_template``).
        identity: the search task's JobIdentity fields; trial job names and labels derive from it.
        backend, ml_conn_id: where the trials run (the backend is rebuilt from the connection, and so are
            the trials' directories under its artifact root and the credentials their workers get: no
            secret is in these arguments, which the metadata database stores).
        follow: FollowOptions (log rules, preemption budget) for every trial's job, as a dict.
        elasticsearch_conn_id: where the trials' logs are read, as the search task found it (None: from the
            backend); the same source whether the search runs in the worker or here.
    """

    def __init__(self, study_name: str, storage_url: str, settings: dict[str, Any], search_space: dict[str, Any],
                 trial_spec: dict[str, Any], identity: dict[str, Any], backend: str | None = None,
                 ml_conn_id: str = TrainingBackendHook.default_conn_name, follow: dict[str, Any] | None = None,
                 elasticsearch_conn_id: str | None = None):
        super().__init__()
        self.study_name = study_name
        self.storage_url = storage_url
        self.settings = settings
        self.search_space = search_space
        self.trial_spec = trial_spec
        self.identity = identity
        self.backend = backend
        self.ml_conn_id = ml_conn_id
        self.follow = follow or {}
        self.elasticsearch_conn_id = elasticsearch_conn_id

    async def run(self):
        scheduler = None
        try:
            scheduler = await asyncio.to_thread(self._scheduler)
            await asyncio.to_thread(scheduler.start)
            while not scheduler.finished:
                if not await asyncio.to_thread(scheduler.advance, SLICE_S) and not scheduler.finished:
                    await asyncio.sleep(scheduler.settings.poll_interval)
        except Exception as exc:  # noqa: BLE001 - reported to the task, which fails with it
            self.log.exception("The search stopped")
            message = f"{type(exc).__name__}: {exc}"
            if scheduler is not None:  # no trial job outlives a failed search
                await asyncio.to_thread(scheduler.stop, message)
            yield TriggerEvent({"status": "error", "study_name": self.study_name, "message": message})
            return
        yield TriggerEvent({"status": "done", "study_name": self.study_name})

    async def on_kill(self) -> None:
        """The user killed the deferred task: cancel the jobs of the trials still running."""
        scheduler = await asyncio.to_thread(self._scheduler)
        await asyncio.to_thread(scheduler.cancel_running)

    def _scheduler(self):
        # Optuna loads here, in the triggerer, when the search runs.
        from airflow_ml_provider.hooks.elasticsearch_logs import job_log_source
        from airflow_ml_provider.jobs.follow import FollowOptions
        from airflow_ml_provider.jobs.naming import JobIdentity
        from airflow_ml_provider.reporting.live_view import trial_views
        from airflow_ml_provider.search.runner import TrialScheduler
        from airflow_ml_provider.search.study import SearchSetup
        from airflow_ml_provider.search.template import spec_template

        setup = TrainingBackendHook(self.ml_conn_id).job_setup(self.backend)  # one connection read
        search = SearchSetup.parse(self.search_space, self.settings, self.storage_url)
        template = spec_template(self.trial_spec, setup.artifact_dir)
        return TrialScheduler(setup.backend, search.study(self.study_name), search.space, search.settings, template,
                              JobIdentity(**self.identity),
                              log=self.log, follow=FollowOptions.from_dict(self.follow) if self.follow else None,
                              submit_kwargs=setup.checked().submit_kwargs(),
                              log_source=lambda name: job_log_source(setup.backend, name, self.elasticsearch_conn_id),
                              trial_view=trial_views(TaskXComs(self.identity), setup.backend.name))


class TaskXComs:
    """The search task instance's XComs, set from the triggerer (each trial's job view), as
    ``triggers.durable`` saves a follower's state: the sync call, from the scheduler's thread. Where they cannot
    be set (no task instance to write for), the first failure is said and the views are no longer saved."""

    def __init__(self, identity: dict[str, Any]):
        self.key: dict[str, Any] | None = {"dag_id": identity["dag_id"], "task_id": identity["task_id"],
                                           "run_id": identity["run_id"], "map_index": identity.get("map_index", -1)}

    def xcom_push(self, key: str, value: Any) -> None:
        if self.key is None:
            return
        from airflow.sdk.execution_time.xcom import XCom

        try:
            XCom.set(key=key, value=value, **self.key)
        except Exception:
            self.key = None
            raise
