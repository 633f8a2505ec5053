"""Lets a training job's log in Elasticsearch decide a task: succeed, fail, or retry on a pattern."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout

from airflow_ml_provider.hooks.elasticsearch_logs import ElasticsearchLogsHook
from airflow_ml_provider.logs.metrics import MetricsTracker
from airflow_ml_provider.logs.outage import Outage
from airflow_ml_provider.logs.rules import LogRules, Verdict
from airflow_ml_provider.logs.source import LogSourceUnavailable
from airflow_ml_provider.logs.watch import LogWatch
from airflow_ml_provider.triggers.elasticsearch_log import ElasticsearchLogTrigger

METRICS_XCOM_KEY = "metrics"


class LogRuleFailed(AirflowException):
    """A ``retry_on`` pattern matched: an infrastructure failure that another try may get past."""


class ElasticsearchLogSensor(BaseSensorOperator):
    """Streams the new log lines of a job's pods into the task log and waits for a pattern.

    A ``succeed_on`` match succeeds; a ``fail_on`` match fails without retry (AirflowFailException);
    a ``retry_on`` match fails retryably. When one line matches several kinds, fail wins over retry
    and retry over succeed. Metrics (``metrics`` regexes' named groups and the runtime's JSON metric
    lines) go to XCom under ``metrics`` as ``{"last", "best", "series"}`` whatever the outcome, and in
    the return value on success: ``{"job", "verdict", "pattern", "source", "line", "metrics"}``.

    Elasticsearch being unreachable or answering 5xx is retried with backoff and a warning; the task
    fails (retryably) only once an outage outlasts ``outage_grace_period`` seconds.

    Deferrable with ``deferrable=True`` (the default where ``[operators] default_deferrable`` is set);
    ``mode="reschedule"`` is refused because it would lose the read position between pokes. The job
    belongs to another task, so killing this one never stops it.

    Args:
        job: the job's name (its ``ml.airflow.apache.org/job-name`` pod label), e.g.
            ``{{ ti.xcom_pull('train')['job_name'] }}``.
        succeed_on / fail_on / retry_on / metrics: regexes, see LogRules.
        metric_goals: ``{"auc": "max"}`` where the default (names with loss/error/mse/... are
            minimized, the rest maximized) picks the wrong "best".
        namespace: only pods of this Kubernetes namespace.
        index: index pattern overriding the connection's.
        elasticsearch_conn_id: an ``elasticsearch`` connection (see ElasticsearchLogsHook).
        outage_grace_period: seconds of Elasticsearch outage tolerated before failing.
        checkpoint_interval: seconds between durable checkpoints of the cursor while deferred.
        max_lines: lines per Elasticsearch request.
    """

    template_fields: Sequence[str] = ("job", "namespace", "index", "succeed_on", "fail_on", "retry_on",
                                      "metrics")
    ui_color = "#fef5e7"

    def __init__(
        self,
        *,
        job: str,
        succeed_on: list[str],
        fail_on: list[str] | None = None,
        retry_on: list[str] | None = None,
        metrics: list[str] | None = None,
        metric_goals: dict[str, str] | None = None,
        namespace: str | None = None,
        index: str | None = None,
        elasticsearch_conn_id: str = ElasticsearchLogsHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        outage_grace_period: float = 600.0,
        checkpoint_interval: float | None = 300.0,
        max_lines: int = 2000,
        poke_interval: float = 5.0,
        **kwargs: Any,
    ):
        super().__init__(poke_interval=poke_interval, **kwargs)
        if not succeed_on:
            raise ValueError(f"{self.task_id}: succeed_on: give at least one pattern that means success")
        if self.mode == "reschedule":
            raise ValueError(f"{self.task_id}: mode='reschedule' would re-read the log from its start at "
                             "every poke; use deferrable=True (or mode='poke')")
        self.job = job
        self.succeed_on = list(succeed_on)
        self.fail_on = list(fail_on or [])
        self.retry_on = list(retry_on or [])
        self.metrics = list(metrics or [])
        self.metric_goals = dict(metric_goals or {})
        self.namespace = namespace
        self.index = index
        self.elasticsearch_conn_id = elasticsearch_conn_id
        self.deferrable = deferrable
        self.outage_grace_period = outage_grace_period
        self.checkpoint_interval = checkpoint_interval
        self.max_lines = max_lines
        self.log_rules(), MetricsTracker(self.metric_goals)  # bad patterns or goals fail at parse time
        self._watch: LogWatch | None = None
        self._outage = Outage(outage_grace_period, first_delay=min(poke_interval, 5.0))

    @cached_property
    def hook(self) -> ElasticsearchLogsHook:
        return ElasticsearchLogsHook(self.elasticsearch_conn_id)

    def log_rules(self) -> LogRules:
        return LogRules(self.succeed_on, self.fail_on, self.retry_on, self.metrics)

    def execute(self, context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        self._defer(cursor=None, metrics_state=None, deadline=time.time() + self.timeout)

    def _defer(self, cursor: Any, metrics_state: dict | None, deadline: float) -> None:
        self.defer(
            trigger=ElasticsearchLogTrigger(
                job=self.job, rules=self.log_rules().to_dict(),
                elasticsearch_conn_id=self.elasticsearch_conn_id, namespace=self.namespace, index=self.index,
                cursor=cursor, metrics_state=metrics_state, metric_goals=self.metric_goals,
                poll_interval=self.poke_interval, outage_grace_period=self.outage_grace_period,
                checkpoint_interval=self.checkpoint_interval, deadline=deadline, max_lines=self.max_lines),
            method_name="execute_complete",
        )

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        context["ti"].xcom_push(key=METRICS_XCOM_KEY, value=event["metrics"])
        status = event["status"]
        if status == "checkpoint":
            self.log.info("Checkpoint of job %s's log; deferring again from it", self.job)
            self._defer(event["cursor"], event["metrics_state"], event["deadline"])
        if status == "matched":
            return self._conclude(event["match"], event["metrics"])
        if status == "timeout":
            raise AirflowSensorTimeout(f"{self.task_id}: no log line of job {self.job} matched succeed_on "
                                       f"within {self.timeout:g} s")
        raise AirflowException(f"{self.task_id}: {event.get('message', event)}")

    def poke(self, context) -> bool | PokeReturnValue:
        if self._watch is None:
            source = self.hook.log_source(self.job, self.namespace, self.index)
            self._watch = LogWatch(source, self.log_rules(), MetricsTracker(self.metric_goals))
        try:
            while True:
                step = self._watch.step(self.max_lines)
                for line in step.lines:
                    self.log.info("%s", line)
                if step.match is not None:
                    metrics = self._watch.tracker.summary()
                    context["ti"].xcom_push(key=METRICS_XCOM_KEY, value=metrics)
                    return PokeReturnValue(True, self._conclude(step.match.to_dict(), metrics))
                if len(step.lines) < self.max_lines:
                    break
        except LogSourceUnavailable as exc:
            delay = self._outage.failed()
            if self._outage.exhausted:
                raise AirflowException(f"{self.task_id}: Elasticsearch unreadable for "
                                       f"{self._outage.elapsed:.0f} s (grace period "
                                       f"{self.outage_grace_period:g} s): {exc}") from None
            self.log.warning("Elasticsearch unavailable (%s); next attempt in about %.1f s, from the same "
                             "cursor", exc, max(delay, self.poke_interval))
            time.sleep(max(0.0, delay - self.poke_interval))
            return False
        if (lasted := self._outage.recovered()) is not None:
            self.log.warning("Elasticsearch reachable again after %.1f s; resumed from the saved cursor",
                             lasted)
        return False

    def _conclude(self, match: dict[str, str], metrics: dict[str, Any]) -> dict[str, Any]:
        where = f"job {self.job}'s log matched {match['verdict']} pattern {match['pattern']!r}: " \
                f"[{match['source']}] {match['line']}"
        if match["verdict"] == Verdict.FAIL.value:
            raise AirflowFailException(f"{self.task_id}: {where}")
        if match["verdict"] == Verdict.RETRY.value:
            raise LogRuleFailed(f"{self.task_id}: {where}")
        self.log.info("%s", where)
        return {"job": self.job, **match, "metrics": metrics}
