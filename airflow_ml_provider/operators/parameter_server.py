"""The operator of parameter-server training (framework ``tensorflow-ps``): a chief, parameter servers, workers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_ml_provider.jobs.roles import PS_TRAINER
from airflow_ml_provider.jobs.spec import Framework
from airflow_ml_provider.operators.config import JobRequest
from airflow_ml_provider.operators.training import BaseTrainingOperator

__all__ = ["ParameterServerTrainingOperator"]


class ParameterServerTrainingOperator(BaseTrainingOperator):
    """TensorFlow parameter-server training: one ``chief`` that coordinates (``ParameterServerStrategy``,
    ``ClusterCoordinator``), ``num_ps`` parameter servers that hold the variables and ``num_workers`` workers that
    run the steps, every process told its place in ``TF_CONFIG`` (``jobs.roles``). A worker's loss is tolerated
    (down to ``min_workers``); a parameter server's fails the job, or preempts it when it was evicted, and the
    job resubmitted resumes from the chief's newest checkpoint. By default the bundled trainer
    (``runtime.tf_ps_trainer``, a custom loop: Keras 3 has no ParameterServerStrategy, keras-team/keras#18624).

    Args:
        num_ps: parameter servers; templated.
        num_workers: workers (the ``worker`` role's count); templated.
        min_workers: the fewest workers the job goes on with (default 1).
        steps: the bundled trainer's training steps (a resumed job continues); templated.
        train_data, test_data: the bundled trainer's data (.npz/.csv files or shard folders; default the digits);
            templated.
        roles: a role's own settings besides its count (``{"ps": {"resources": {"memory": "16Gi"},
            "priority_class": "high"}}``: command, image, resources, priority_class, on_failure).
        command: the argv every role runs (default: the bundled trainer with the arguments above).
        outputs, job, follow, on_finish, ml_conn_id, elasticsearch_conn_id, deferrable: see
            :class:`~airflow_ml_provider.operators.training.BaseTrainingOperator`.
    """

    framework = Framework.TENSORFLOW_PS
    template_fields: Sequence[str] = (*BaseTrainingOperator.template_fields, "num_ps", "steps", "train_data",
                                      "test_data")

    def __init__(self, *, num_ps: int = 1, min_workers: int | None = None, steps: int = 200,
                 train_data: str | None = None, test_data: str | None = None,
                 roles: dict[str, dict[str, Any]] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.num_ps = num_ps
        self.min_workers = min_workers
        self.steps = steps
        self.train_data = train_data
        self.test_data = test_data
        self.roles = roles or {}

    def build_command(self) -> list[str]:
        if self.command is not None:
            return self.command
        data = [arg for flag, value in (("--train-data", self.train_data), ("--test-data", self.test_data))
                if value for arg in (flag, value)]
        return ["python", "-m", PS_TRAINER, "--steps", str(self.steps), *data]

    def job_request(self) -> JobRequest:
        workers = {"count": int(self.num_workers),
                   **({"min_count": self.min_workers} if self.min_workers is not None else {})}
        counts = {"chief": {}, "ps": {"count": int(self.num_ps)}, "worker": workers}
        roles = {name: {**self.roles.get(name, {}), **count} for name, count in counts.items()}
        others = {name: role for name, role in self.roles.items() if name not in roles}  # (refused by the spec)
        return JobRequest(self.framework, self.build_command(), roles={**roles, **others})
