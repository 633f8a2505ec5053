"""Waits for a training job in the triggerer, streaming its log lines into the task log."""

from __future__ import annotations

import asyncio
from typing import Any

from airflow.triggers.base import TriggerEvent

from airflow_ml_provider.hooks.elasticsearch_logs import job_log_source
from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.jobs.drivers import follow_async
from airflow_ml_provider.jobs.follow import Decision, Follower, FollowOptions
from airflow_ml_provider.observability import JobMetrics
from airflow_ml_provider.triggers.durable import DurableFollowTrigger


class TrainingJobTrigger(DurableFollowTrigger):
    """Follows one job through the follow core and fires once it decides: ``finish``, ``resubmit``
    or ``fail`` (the event carries the follower's state, so the task continues with the same metrics,
    checkpoint and log position).

    The backend is rebuilt from the connection; statuses come from ``Backend.statuses`` (the shared
    watch on Kubernetes, polling elsewhere), so this trigger never names a backend type. After every
    batch of lines it shows, the follower's state is written to an XCom of its task instance
    (``state_key``: dag_id/task_id/run_id/map_index), before the batch is shown (see
    DurableFollowTrigger); a trigger restarted by another triggerer reads it back and continues after
    the last line shown: a restart skips no line, and repeats none unlabelled.

    With ``owns_job`` (the training operators) killing the task cancels the job; a sensor watching
    another task's job passes False and never stops it. With ``metric_tags`` (``JobMetrics.tags``: the
    training operators pass them) the job's state changes, loss and throughput go out through Airflow's
    metrics from the triggerer, as a sync training task sends them from its worker.
    """

    def __init__(self, job_name: str, backend: str | None = None,
                 ml_conn_id: str = TrainingBackendHook.default_conn_name, options: dict[str, Any] | None = None,
                 state: dict[str, Any] | None = None, stream_logs: bool = True,
                 elasticsearch_conn_id: str | None = None, owns_job: bool = True,
                 state_key: dict[str, Any] | None = None, metric_tags: dict[str, str] | None = None):
        super().__init__()
        self.job_name = job_name
        self.backend = backend
        self.ml_conn_id = ml_conn_id
        self.options = options or {}
        self.state = state or {}
        self.stream_logs = stream_logs
        self.elasticsearch_conn_id = elasticsearch_conn_id
        self.owns_job = owns_job
        self.state_key = state_key
        self.metric_tags = metric_tags

    async def run(self):
        backend = await asyncio.to_thread(TrainingBackendHook(self.ml_conn_id).get_backend, self.backend)
        source = (await asyncio.to_thread(job_log_source, backend, self.job_name, self.elasticsearch_conn_id)
                  if self.stream_logs else None)
        await self._resume(source)
        follower = Follower(FollowOptions.from_dict(self.options), self.state)
        step = await follow_async(follower, self.log, backend, self.job_name, source, self.owns_job,
                                  on_progress=self._save,
                                  on_step=JobMetrics(**self.metric_tags) if self.metric_tags else None)
        yield TriggerEvent(event(self.job_name, step, follower))

    async def on_kill(self) -> None:
        """The user killed the deferred task: stop the job, if this task owns it."""
        if not self.owns_job:
            return
        backend = await asyncio.to_thread(TrainingBackendHook(self.ml_conn_id).get_backend, self.backend)
        await asyncio.to_thread(backend.cancel, self.job_name)


def event(job_name: str, step: Decision, follower: Follower) -> dict[str, Any]:
    """A final step as a JSON-serializable trigger event, with what the task needs to continue."""
    return {"job_name": job_name, **step.to_dict(), "options": follower.options.to_dict(), "state": follower.state}
