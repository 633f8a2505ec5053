"""Waits for a training job submitted elsewhere (another task, another DAG) to finish."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseSensorOperator, conf
from airflow.sdk.exceptions import AirflowException

from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.jobs.drivers import SyncDriver
from airflow_ml_provider.jobs.follow import Action, Decision, Follower, FollowOptions
from airflow_ml_provider.triggers.training_job import TrainingJobTrigger


class TrainingJobSensor(BaseSensorOperator):
    """Succeeds when the job succeeds; fails when it fails, is preempted, cancelled, or vanishes.

    The job belongs to the task that submitted it: this sensor only watches. Killing, clearing or
    marking this task never cancels or deletes the job, and it never resubmits a preempted one.

    ``job_name`` is typically ``{{ ti.xcom_pull('train')['job_name'] }}``.
    """

    template_fields: Sequence[str] = ("job_name", "backend")

    def __init__(
        self,
        *,
        job_name: str,
        backend: str | None = None,
        ml_conn_id: str = TrainingBackendHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.job_name = job_name
        self.backend = backend
        self.ml_conn_id = ml_conn_id
        self.deferrable = deferrable

    @cached_property
    def hook(self) -> TrainingBackendHook:
        return TrainingBackendHook(self.ml_conn_id)

    def _options(self) -> FollowOptions:
        return FollowOptions(max_preemptions=0, poll_interval=self.poke_interval)

    def execute(self, context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        backend = self.hook.get_backend(self.backend)
        self.defer(
            trigger=TrainingJobTrigger(self.job_name, backend.name, self.ml_conn_id,
                                       options=self._options().to_dict(), stream_logs=False, owns_job=False),
            method_name="execute_complete",
        )

    def poke(self, context) -> bool:
        backend = self.hook.get_backend(self.backend)
        step = SyncDriver(Follower(self._options()), self.log, backend, self.job_name, owns_job=False).poll()
        if step.status is not None:
            self.log.info("Job %s is %s %s", self.job_name, step.status.state.value, step.status.message)
        return self._decided(step)

    def execute_complete(self, context, event: dict[str, Any]) -> None:
        self._decided(Decision.from_dict(event))

    def _decided(self, step: Decision) -> bool:
        if step.action is Action.FINISH:
            return True
        if step.action is Action.WAIT:
            return False
        raise AirflowException(f"{self.task_id}: job {self.job_name}: {step.message}")
