"""The grouped, validated options of the job-running operators (``job=``, ``outputs=``), what such an operator
asks of its job (``JobRequest``, ``OnFinish``) and how a job's failure is raised.

Each is a pydantic model that an operator also takes as a dict (what a Param or a recipe passes). The
operator keeps the dict (``model_dump``), so Airflow renders the Jinja in its string values like any
templated field; the runner validates the rendered dict again before it builds the job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from airflow.sdk.exceptions import AirflowException
from pydantic import BaseModel, ConfigDict, ValidationError

from airflow_ml_provider.jobs.spec import Framework, KubernetesOptions, Resources, Scheduling


class JobConfig(BaseModel):
    """Where and how a task's job runs, apart from its command and worker count.

    Args:
        backend: backend name (default: the training connection's ``backend`` extra, else ``local``).
        image: the workers' image (Kubernetes) or Python environment (local); default: the connection's.
        env: extra environment variables of every worker.
        resources: per-worker CPU, memory, GPUs (:class:`~airflow_ml_provider.jobs.spec.Resources`).
        scheduling: queue, priority, gang scheduling (:class:`~airflow_ml_provider.jobs.spec.Scheduling`).
        kubernetes: pod-level options (:class:`~airflow_ml_provider.jobs.spec.KubernetesOptions`).
        working_dir: the workers' working directory.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str | None = None
    image: str | None = None
    env: dict[str, str] = {}
    resources: Resources = Resources()
    scheduling: Scheduling = Scheduling()
    kubernetes: KubernetesOptions = KubernetesOptions()
    working_dir: str | None = None


class TrainingOutputs(BaseModel):
    """Where a training job writes, instead of its own directories under the artifact root.

    Args:
        model_dir: the directory the trained model is saved in.
        checkpoint_dir: the directory checkpoints are written to (and resumed from).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_dir: str | None = None
    checkpoint_dir: str | None = None


def as_dict(model: type[BaseModel], value: BaseModel | dict[str, Any] | None, field: str) -> dict[str, Any]:
    """``value`` (the model, its dict or None) validated, as the dict an operator keeps and Airflow renders.

    Raises:
        ValueError: naming ``field`` and the offending key.
    """
    return parse(model, value, field).model_dump(exclude_defaults=True)


def parse(model: type[BaseModel], value: BaseModel | dict[str, Any] | None, field: str) -> Any:
    """``value`` as ``model``; raises ValueError naming ``field`` and each offending key."""
    if isinstance(value, model):
        return value
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"{field}: expected {model.__name__} or a dict, got {type(value).__name__}")
    try:
        return model.model_validate(value or {})
    except ValidationError as exc:
        problems = "; ".join(f"{field}.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ValueError(problems) from None


class OnFinish(str, Enum):
    """What to do with the job's record once the task is done (artifacts are always kept)."""

    KEEP = "keep"
    DELETE = "delete"
    DELETE_SUCCEEDED = "delete_succeeded"


class TrainingJobFailed(AirflowException):
    """The job ended without succeeding; retryable, since workers fail for infrastructure reasons too."""


@dataclass(frozen=True)
class JobRequest:
    """What the operator decides about its job; the rest comes from its ``job=`` config and the connection.

    Args:
        framework: how the workers are started.
        command: the worker argv (None: the framework's default, where it has one).
        num_workers: workers (elastic: the initial count); ``min_workers``/``max_workers`` the elastic bounds.
        inputs: what the job reads from other jobs' directories (see ``TrainingJobSpec.inputs``).
        output_dirs: directories it writes besides its own (see ``TrainingJobSpec.output_dirs``).
        nproc_per_node: ranks per worker (PyTorch only).
        image_of: the framework whose default image (local: environment) runs the job, when not its own:
            a generic job that loads a model runs where that model's trainer ran.
        shards: a sharded job's plan (``jobs.shards.ShardPlan`` as a dict); its ``output`` defaults to the
            job's ``<model_dir>/shards``.
        roles: a job of several roles (``TrainingJobSpec.roles`` as a dict); ``num_workers`` is then its processes.
    """

    framework: Framework
    command: list[str] | None
    num_workers: int | str = 1
    min_workers: int | None = None
    max_workers: int | None = None
    inputs: list[str] = field(default_factory=list)
    output_dirs: list[str] = field(default_factory=list)
    nproc_per_node: int = 1
    image_of: str | None = None
    shards: dict[str, Any] | None = None
    roles: dict[str, Any] | None = None
