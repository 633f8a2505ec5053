"""Training metrics through Airflow's own metrics (``[metrics]``: StatsD, DogStatsD or OpenTelemetry), so
the Prometheus/Grafana stack that already charts Airflow charts training too.

Names (with the ``[metrics] statsd_prefix``, ``airflow.`` by default), each tagged ``dag_id``,
``task_id``, ``job`` and ``framework`` (tags reach OpenTelemetry and DogStatsD; plain StatsD carries
them with ``statsd_influxdb_enabled``):

- ``ml_training.metric.<name>`` (gauge): every metric point the job reports (``loss``, ``accuracy``,
  ``auc``...), as the log lines arrive;
- ``ml_training.steps_per_second`` (gauge): training throughput, steps (epochs, boosting rounds) per
  second between two reports;
- ``ml_training.job_state.<state>`` (counter): each change of the job's state (``pending``,
  ``running``, ``succeeded``, ``failed``, ``preempted``...) the follower sees.

Fed by the follow drivers' ``on_step`` hook (one call per round): in the worker for a sync training task,
in the triggerer for a deferred one (``TrainingJobTrigger`` rebuilds it from ``tags``). Never raises into
the follower.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

PREFIX = "ml_training"


class JobMetrics:
    """Turns the follower's steps for one job into metrics: an ``on_step`` callable for the drivers.
    ``JobMetrics(**metrics.tags)`` rebuilds it (the tags are its arguments: what a trigger serializes)."""

    def __init__(self, job: str, dag_id: str, task_id: str, framework: str,
                 clock: Callable[[], float] = time.monotonic):
        self.tags = {"dag_id": dag_id, "task_id": task_id, "job": job, "framework": framework}
        self.clock = clock
        self.state: str | None = None
        self.last: tuple[float, int] | None = None  # (when, highest step) at the previous report

    def __call__(self, step: Any) -> None:
        try:
            self._emit(step)
        except Exception as exc:  # noqa: BLE001 - metrics must never break following the job
            log.warning("Could not emit training metrics for job %s: %s", self.tags["job"], exc)

    def _emit(self, step: Any) -> None:
        from airflow.sdk.observability import stats

        status = getattr(step, "status", None)
        if status is not None and status.state.value != self.state:
            self.state = status.state.value
            stats.incr(f"{PREFIX}.job_state.{self.state.lower()}", tags=self.tags)
        if not step.points:
            return
        for name, _, value in step.points:
            stats.gauge(f"{PREFIX}.metric.{stats.normalize_name_for_stats(name)}", value, tags=self.tags)
        now, highest = self.clock(), max(number for _, number, _ in step.points)
        if self.last is not None and highest > self.last[1] and now > self.last[0]:
            stats.gauge(f"{PREFIX}.steps_per_second", (highest - self.last[1]) / (now - self.last[0]),
                        tags=self.tags)
        self.last = (now, highest)


def job_metrics(context: Any, job: str, framework: str) -> JobMetrics:
    """The ``on_step`` hook for a task following ``job``."""
    ti = context["ti"]
    return JobMetrics(job, ti.dag_id, ti.task_id, framework)
