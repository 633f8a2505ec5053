"""Lets a training job's log in Elasticsearch decide a task: succeed, fail, or retry on a pattern."""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import replace
from functools import cached_property
from typing import Any

from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout

from airflow_ml_provider.hooks.elasticsearch_logs import ElasticsearchLogsHook
from airflow_ml_provider.jobs.drivers import SyncDriver
from airflow_ml_provider.jobs.follow import Action, Decision, Follower, FollowOptions
from airflow_ml_provider.logs.metrics import MetricsTracker
from airflow_ml_provider.operators.task_log import task_log_capped
from airflow_ml_provider.triggers.durable import save_before_deferring, task_key
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
    fails (retryably) only once an outage outlasts ``follow``'s ``outage_grace_s`` seconds.

    Deferrable with ``deferrable=True`` (the default where ``[operators] default_deferrable`` is set);
    ``mode="reschedule"`` is refused because it would lose the read position between pokes. The job
    belongs to another task, so killing this one never stops it.

    Args:
        job: the job's name (its ``ml.airflow.apache.org/job-name`` pod label), e.g.
            ``{{ ti.xcom_pull('train')['job_name'] }}``.
        follow: how the log is followed, as the job-running operators take it
            (:class:`~airflow_ml_provider.jobs.follow_options.FollowOptions` or its dict): ``rules``
            (``succeed_on``, at least one, and ``fail_on``/``retry_on``/``metrics`` regexes, see LogRules;
            templated), ``metric_goals`` (``{"auc": "max"}`` where the default, names with
            loss/error/mse/... minimized and the rest maximized, picks the wrong "best") and
            ``outage_grace_s`` (seconds of Elasticsearch outage tolerated before failing; default 600).
            The sensor polls every ``poke_interval``.
        namespace: only pods of this Kubernetes namespace.
        index: index pattern overriding the connection's.
        elasticsearch_conn_id: an ``elasticsearch`` connection (see ElasticsearchLogsHook).
        succeed_on / fail_on / retry_on / metrics / metric_goals / outage_grace_period: deprecated, the
            same as ``follow``'s ``rules``, ``metric_goals`` and ``outage_grace_s``.
    """

    template_fields: Sequence[str] = ("job", "namespace", "index", "follow")
    ui_color = "#fef5e7"

    def __init__(
        self,
        *,
        job: str,
        follow: FollowOptions | dict[str, Any] | None = None,
        namespace: str | None = None,
        index: str | None = None,
        elasticsearch_conn_id: str = ElasticsearchLogsHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poke_interval: float = 1.0,
        succeed_on: list[str] | None = None,
        fail_on: list[str] | None = None,
        retry_on: list[str] | None = None,
        metrics: list[str] | None = None,
        metric_goals: dict[str, str] | None = None,
        outage_grace_period: float | None = None,
        **kwargs: Any,
    ):
        super().__init__(poke_interval=poke_interval, **kwargs)
        if self.mode == "reschedule":
            raise ValueError(f"{self.task_id}: mode='reschedule' would re-read the log from its start at "
                             "every poke; use deferrable=True (or mode='poke')")
        flat = {"succeed_on": succeed_on, "fail_on": fail_on, "retry_on": retry_on, "metrics": metrics}
        try:  # refused when the DAG file is parsed, naming the field
            options = _with_flat_arguments(FollowOptions.of(follow), {k: v for k, v in flat.items() if v is not None},
                                           metric_goals, outage_grace_period)
            if not options.rules.get("succeed_on"):
                raise ValueError("follow.rules.succeed_on: give at least one pattern that means success")
            MetricsTracker(options.metric_goals)
        except ValueError as exc:
            raise ValueError(f"{self.task_id}: {exc}") from None
        self.follow = options.to_dict()  # a dict: its patterns are templated
        self.job = job
        self.namespace = namespace
        self.index = index
        self.elasticsearch_conn_id = elasticsearch_conn_id
        self.deferrable = deferrable
        self._driver: SyncDriver | None = None

    @cached_property
    def hook(self) -> ElasticsearchLogsHook:
        return ElasticsearchLogsHook(self.elasticsearch_conn_id)

    def options(self, deadline: float | None) -> FollowOptions:
        """The (rendered) ``follow`` options, polled every ``poke_interval`` until ``deadline``."""
        full_log = self.hook.log_source(self.job, self.namespace, self.index).location()
        follow = FollowOptions.from_dict(self.follow)
        return task_log_capped(replace(follow, poll_interval=self.poke_interval, deadline=deadline, full_log=full_log))

    def execute(self, context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        save_before_deferring(context, {})
        self.defer(
            trigger=ElasticsearchLogTrigger(
                job=self.job, elasticsearch_conn_id=self.elasticsearch_conn_id,
                options=self.options(time.time() + self.timeout).to_dict(), namespace=self.namespace,
                index=self.index, state_key=task_key(context)),
            method_name="execute_complete",
        )

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        follower = Follower(FollowOptions.from_dict(event["options"]), event["state"])
        return self._conclude(context, follower, Decision.from_dict(event))

    def poke(self, context) -> bool | PokeReturnValue:
        """Reads every line there is now; the sensor's own timeout is Airflow's (no deadline here)."""
        if self._driver is None:
            source = self.hook.log_source(self.job, self.namespace, self.index)
            self._driver = SyncDriver(Follower(self.options(None)), self.log, source=source, owns_job=False)
        step = self._driver.poll_ready()
        if step.action is Action.WAIT:
            time.sleep(max(0.0, step.delay - self.poke_interval))  # an outage's backoff outlasts a poke
            return False
        return PokeReturnValue(True, self._conclude(context, self._driver.follower, step))

    def _conclude(self, context, follower: Follower, step: Decision) -> dict[str, Any]:
        metrics = follower.tracker.summary()
        context["ti"].xcom_push(key=METRICS_XCOM_KEY, value=metrics)
        if step.timed_out:
            raise AirflowSensorTimeout(f"{self.task_id}: no log line of job {self.job} matched succeed_on "
                                       f"within {self.timeout:g} s")
        if step.match is None:  # the log store stayed unreadable past the grace period
            raise AirflowException(f"{self.task_id}: {step.message}")
        match = step.match.to_dict()
        where = f"job {self.job}'s log matched {match['verdict']} pattern {match['pattern']!r}: " \
                f"[{match['source']}] {match['line']}"
        if step.action is Action.FAIL:
            raise (LogRuleFailed if step.retryable else AirflowFailException)(f"{self.task_id}: {where}")
        self.log.info("%s", where)
        return {"job": self.job, **match, "metrics": metrics}


def _with_flat_arguments(follow: FollowOptions, rules: dict[str, list[str]], metric_goals: dict[str, str] | None,
                         outage_grace_period: float | None) -> FollowOptions:
    """``follow`` with what the deprecated flat arguments say (a deprecation warning names each one given)."""
    given = [*rules, *(["metric_goals"] if metric_goals is not None else []),
             *(["outage_grace_period"] if outage_grace_period is not None else [])]
    if not given:
        return follow
    warnings.warn(f"ElasticsearchLogSensor: {', '.join(given)} are deprecated; pass follow={{'rules': {{...}}, "
                  "'metric_goals': ..., 'outage_grace_s': ...}} as the training operators take it",
                  AirflowProviderDeprecationWarning, stacklevel=4)
    changes: dict[str, Any] = {"rules": {**follow.rules, **{kind: list(patterns) for kind, patterns in rules.items()}}}
    if metric_goals is not None:
        changes["metric_goals"] = dict(metric_goals)
    if outage_grace_period is not None:
        changes["outage_grace_s"] = outage_grace_period
    return FollowOptions.from_dict({**follow.to_dict(), **changes})
