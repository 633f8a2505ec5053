"""Streams a job's log lines from Elasticsearch into the task log until a log rule decides the task."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_ml_provider.hooks.elasticsearch_logs import ElasticsearchLogsHook
from airflow_ml_provider.logs.elasticsearch import ElasticsearchLogSource
from airflow_ml_provider.logs.metrics import MetricsTracker
from airflow_ml_provider.logs.outage import Outage
from airflow_ml_provider.logs.rules import LogRules
from airflow_ml_provider.logs.source import LogSourceUnavailable
from airflow_ml_provider.logs.watch import LogWatch


class ElasticsearchLogTrigger(BaseTrigger):
    """Prints every new line of the job's pods, in order and once, and fires one event:

    - ``{"status": "matched", "match": {...}, "metrics": ...}``: a line matched a rule;
    - ``{"status": "checkpoint", "cursor", "metrics_state", "deadline", "metrics"}``: after
      ``checkpoint_interval`` seconds of streaming, so the task defers again from this position. The
      triggerer stores a trigger's arguments only when the task defers; a checkpoint makes the cursor
      and the metric series durable, so a triggerer restart replays at most one interval, never the
      whole log;
    - ``{"status": "outage", "message": ...}``: Elasticsearch stayed unreadable longer than
      ``outage_grace_period``; shorter outages are retried with backoff and a warning each time;
    - ``{"status": "timeout"}``: the wall-clock ``deadline`` passed.

    ``serialize()`` always returns the current cursor and metric state, so a trigger rebuilt from it
    continues after the last line printed.
    """

    def __init__(self, *, job: str, rules: dict[str, list[str]], elasticsearch_conn_id: str,
                 namespace: str | None = None, index: str | None = None, cursor: Any = None,
                 metrics_state: dict[str, Any] | None = None, metric_goals: dict[str, str] | None = None,
                 poll_interval: float = 5.0, outage_grace_period: float = 600.0,
                 checkpoint_interval: float | None = 300.0, deadline: float | None = None,
                 max_lines: int = 2000):
        super().__init__()
        self.job = job
        self.rules = rules
        self.elasticsearch_conn_id = elasticsearch_conn_id
        self.namespace = namespace
        self.index = index
        self.cursor = cursor
        self.metrics_state = metrics_state or {}
        self.metric_goals = metric_goals or {}
        self.poll_interval = poll_interval
        self.outage_grace_period = outage_grace_period
        self.checkpoint_interval = checkpoint_interval
        self.deadline = deadline
        self.max_lines = max_lines
        self._source: ElasticsearchLogSource | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"job": self.job, "rules": self.rules, "elasticsearch_conn_id": self.elasticsearch_conn_id,
             "namespace": self.namespace, "index": self.index, "cursor": self.cursor,
             "metrics_state": self.metrics_state, "metric_goals": self.metric_goals,
             "poll_interval": self.poll_interval, "outage_grace_period": self.outage_grace_period,
             "checkpoint_interval": self.checkpoint_interval, "deadline": self.deadline,
             "max_lines": self.max_lines},
        )

    async def run(self):
        hook = ElasticsearchLogsHook(self.elasticsearch_conn_id)
        self._source = await asyncio.to_thread(hook.log_source, self.job, self.namespace, self.index)
        tracker = MetricsTracker(self.metric_goals, state=self.metrics_state)
        watch = LogWatch(self._source, LogRules.from_dict(self.rules), tracker, self.cursor)
        self.log.info("Streaming the log of job %s from %s (%s)", self.job, hook.url, self._source.index)
        outage = Outage(self.outage_grace_period, first_delay=min(self.poll_interval, 5.0))
        loop = asyncio.get_running_loop()
        interval = float("inf") if self.checkpoint_interval is None else self.checkpoint_interval
        checkpoint_at = loop.time() + interval
        while True:
            if self.deadline is not None and time.time() >= self.deadline:
                yield TriggerEvent({"status": "timeout", "job": self.job, "metrics": tracker.summary()})
                return
            try:
                step = await asyncio.to_thread(watch.step, self.max_lines)
            except LogSourceUnavailable as exc:
                delay = outage.failed()
                if outage.exhausted:
                    yield TriggerEvent({"status": "outage", "job": self.job, "metrics": tracker.summary(),
                                        "message": f"Elasticsearch unreadable for {outage.elapsed:.0f} s "
                                                   f"(grace period {self.outage_grace_period:g} s): {exc}"})
                    return
                self.log.warning("Elasticsearch unavailable (%s); retrying in %.1f s, from the same cursor; "
                                 "the task fails only if this lasts over %g s", exc, delay,
                                 self.outage_grace_period)
                await asyncio.sleep(delay)
                continue
            if (lasted := outage.recovered()) is not None:
                self.log.warning("Elasticsearch reachable again after %.1f s; resuming from the saved cursor",
                                 lasted)
            for line in step.lines:
                self.log.info("%s", line)
            self.cursor, self.metrics_state = watch.cursor, tracker.state()
            if step.match is not None:
                yield TriggerEvent({"status": "matched", "job": self.job, "match": step.match.to_dict(),
                                    "metrics": tracker.summary()})
                return
            if step.lines and loop.time() >= checkpoint_at:
                yield TriggerEvent({"status": "checkpoint", "job": self.job, "metrics": tracker.summary(),
                                    "cursor": {**self.cursor, "pit": None}, "deadline": self.deadline,
                                    "metrics_state": self.metrics_state})
                return
            if len(step.lines) < self.max_lines:  # caught up: wait for new lines
                await asyncio.sleep(self.poll_interval)

    async def cleanup(self) -> None:
        """Release the point in time now (the cursor's sort values alone are enough to continue)."""
        if self._source is not None:
            await asyncio.to_thread(self._source.close, self.cursor)
