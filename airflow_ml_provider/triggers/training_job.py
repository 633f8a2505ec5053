"""Waits for a training job in the triggerer, streaming its log lines into the task log."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_ml_provider.hooks.elasticsearch_logs import job_log_source
from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.jobs.backends.base import Backend, JobNotFound
from airflow_ml_provider.jobs.backends.kube_watch import DELETED, CollectionWatcher
from airflow_ml_provider.jobs.backends.kube_rest import JOB_NAME_LABEL, resource_path
from airflow_ml_provider.jobs.state import JobStatus
from airflow_ml_provider.logs.rules import LogRules, RuleMatch


class TrainingJobTrigger(BaseTrigger):
    """Fires once the job is terminal and (with ``stream_logs``) its whole log has been streamed.

    Kubernetes jobs are followed through one shared watch per namespace and kind (no per-job
    polling); local jobs by polling their status file. The backend is rebuilt from the connection,
    so nothing but names and the log cursor is serialized. With ``elasticsearch_conn_id`` the lines
    come from Elasticsearch, read once more after the job ends and the log's settle time has passed.
    """

    def __init__(self, job_name: str, backend: str | None = None,
                 ml_conn_id: str = TrainingBackendHook.default_conn_name, cursor: Any = None,
                 poll_interval: float = 2.0, stream_logs: bool = True,
                 elasticsearch_conn_id: str | None = None, fail_on: list[str] | None = None,
                 retry_on: list[str] | None = None):
        super().__init__()
        self.job_name = job_name
        self.backend = backend
        self.ml_conn_id = ml_conn_id
        self.cursor = cursor
        self.poll_interval = poll_interval
        self.stream_logs = stream_logs
        self.elasticsearch_conn_id = elasticsearch_conn_id
        self.fail_on = list(fail_on or [])
        self.retry_on = list(retry_on or [])
        self.rules = LogRules(fail_on=self.fail_on, retry_on=self.retry_on)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"job_name": self.job_name, "backend": self.backend, "ml_conn_id": self.ml_conn_id,
             "cursor": self.cursor, "poll_interval": self.poll_interval, "stream_logs": self.stream_logs,
             "elasticsearch_conn_id": self.elasticsearch_conn_id, "fail_on": self.fail_on,
             "retry_on": self.retry_on},
        )

    async def run(self):
        hook = TrainingBackendHook(self.ml_conn_id)
        backend = await asyncio.to_thread(hook.get_backend, self.backend)
        source = (await asyncio.to_thread(job_log_source, backend, self.job_name, self.elasticsearch_conn_id,
                                          self.log) if self.stream_logs else None)
        from airflow_ml_provider.jobs.backends.kubernetes import KubernetesBackend  # the client, only when used

        statuses = (self._watched(hook, backend) if isinstance(backend, KubernetesBackend)
                    else self._polled(backend))
        last_state = None
        try:
            async for status in statuses:  # read before the lines: a terminal status means the log is complete
                if status.state != last_state:
                    self.log.info("Job %s is %s %s", self.job_name, status.state.value, status.message)
                    last_state = status.state
                if source is not None and (match := await self._drain(source)):
                    await asyncio.to_thread(backend.cancel, self.job_name)  # the log decided: stop the job
                    yield TriggerEvent({"job_name": self.job_name, "rule": match.to_dict(), "cursor": self.cursor})
                    return
                if status.state.is_terminal:
                    if source is not None and source.settle_s:  # lines shipped late still arrive meanwhile
                        await asyncio.sleep(source.settle_s)
                        if match := await self._drain(source):
                            yield TriggerEvent({"job_name": self.job_name, "rule": match.to_dict(),
                                                "cursor": self.cursor})
                            return
                    yield TriggerEvent({"job_name": self.job_name, "status": status.to_dict(), "cursor": self.cursor})
                    return
        except JobNotFound as exc:
            yield TriggerEvent({"job_name": self.job_name, "error": f"job vanished: {exc}"})

    async def _drain(self, source) -> RuleMatch | None:
        """Print every new line; stop at the first one a ``fail_on``/``retry_on`` rule matches."""
        while True:
            batch = await asyncio.to_thread(source.read, self.cursor)
            self.cursor = batch.cursor
            for line in batch.lines:
                self.log.info("%s", line)
                if (match := self.rules.check(line)) is not None:
                    return match
            if not batch.lines:
                return None

    async def _polled(self, backend: Backend) -> AsyncIterator[JobStatus]:
        while True:
            yield await asyncio.to_thread(backend.status, self.job_name)
            await asyncio.sleep(self.poll_interval)

    async def _watched(self, hook: TrainingBackendHook, backend) -> AsyncIterator[JobStatus]:
        """Statuses from the shared watch: at once on every change, else every poll interval (for logs)."""
        path = resource_path(backend.api_version, backend.kind, backend.namespace)
        watcher = CollectionWatcher.shared((self.ml_conn_id,), hook.async_api_factory(), path, JOB_NAME_LABEL)
        status = None
        async with watcher.subscribe(self.job_name) as changes:
            while True:
                try:
                    obj = await asyncio.wait_for(changes.get(), self.poll_interval)
                except asyncio.TimeoutError:
                    if status is not None:
                        yield status
                    continue
                if obj is DELETED:  # or not yet seen by the watch: ask the API server directly
                    status = await asyncio.to_thread(backend.status, self.job_name)
                else:
                    status = await asyncio.to_thread(backend.job_status, obj)
                yield status

    async def on_kill(self) -> None:
        """The user killed the deferred task: stop the job too."""
        backend = await asyncio.to_thread(TrainingBackendHook(self.ml_conn_id).get_backend, self.backend)
        await asyncio.to_thread(backend.cancel, self.job_name)
