"""Waits for a training job submitted elsewhere (another task, another DAG) to finish."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseSensorOperator, conf
from airflow.sdk.exceptions import AirflowException

from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.jobs.backends.base import JobNotFound
from airflow_ml_provider.jobs.state import JobState, JobStatus
from airflow_ml_provider.triggers.training_job import TrainingJobTrigger


class TrainingJobSensor(BaseSensorOperator):
    """Succeeds when the job succeeds; fails when it fails, is cancelled, or vanishes.

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

    def execute(self, context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        backend = self.hook.get_backend(self.backend)
        self.defer(
            trigger=TrainingJobTrigger(self.job_name, backend.name, self.ml_conn_id,
                                       poll_interval=self.poke_interval, stream_logs=False),
            method_name="execute_complete",
        )

    def poke(self, context) -> bool:
        try:
            status = self.hook.get_backend(self.backend).status(self.job_name)
        except JobNotFound as exc:
            raise AirflowException(f"{self.task_id}: job {self.job_name} vanished: {exc}") from None
        self.log.info("Job %s is %s %s", self.job_name, status.state.value, status.message)
        return _succeeded(self.job_name, status)

    def execute_complete(self, context, event: dict[str, Any]) -> None:
        if "error" in event:
            raise AirflowException(f"{self.task_id}: {event['error']}")
        _succeeded(self.job_name, JobStatus.from_dict(event["status"]))


def _succeeded(name: str, status: JobStatus) -> bool:
    if status.state is JobState.SUCCEEDED:
        return True
    if status.state.is_terminal:
        raise AirflowException(f"job {name} ended {status.state.value}: {status.message}")
    return False
