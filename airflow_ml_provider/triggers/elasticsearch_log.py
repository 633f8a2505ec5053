"""Streams a job's log lines from Elasticsearch into the task log until a log rule decides the task."""

from __future__ import annotations

import asyncio
from typing import Any

from airflow.triggers.base import TriggerEvent

from airflow_ml_provider.hooks.elasticsearch_logs import ElasticsearchLogsHook
from airflow_ml_provider.jobs.drivers import follow_async
from airflow_ml_provider.jobs.follow import Follower, FollowOptions
from airflow_ml_provider.triggers.durable import DurableFollowTrigger
from airflow_ml_provider.triggers.training_job import event


class ElasticsearchLogTrigger(DurableFollowTrigger):
    """Prints every new line of the job's pods, in order and once, through the follow core, and fires
    one event when it decides: a rule matched (``finish`` for succeed_on, ``fail`` for fail_on/retry_on),
    the deadline passed, or Elasticsearch stayed unreadable past the outage grace period. The event
    carries the follower's state: metrics (``last``/``best``/``series``) and the cursor.

    The job belongs to another task: this trigger never stops it. The read position is durable (see
    DurableFollowTrigger), so a triggerer restart continues after the last line shown (the batch a
    killed triggerer was showing is shown again first, labelled ``(again)``).
    """

    def __init__(self, *, job: str, elasticsearch_conn_id: str, options: dict[str, Any],
                 namespace: str | None = None, index: str | None = None, state: dict[str, Any] | None = None,
                 state_key: dict[str, Any] | None = None):
        super().__init__()
        self.job = job
        self.elasticsearch_conn_id = elasticsearch_conn_id
        self.options = options
        self.namespace = namespace
        self.index = index
        self.state = state or {}
        self.state_key = state_key

    async def run(self):
        hook = ElasticsearchLogsHook(self.elasticsearch_conn_id)
        source = await asyncio.to_thread(hook.log_source, self.job, self.namespace, self.index)
        self.log.info("Streaming the log of job %s from %s (%s)", self.job, hook.url, source.index)
        await self._resume(source)
        follower = Follower(FollowOptions.from_dict(self.options), self.state)
        step = await follow_async(follower, self.log, source=source, owns_job=False, on_progress=self._save)
        yield TriggerEvent(event(self.job, step, follower))
