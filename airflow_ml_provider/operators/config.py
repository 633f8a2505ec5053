"""The grouped, validated options of the job-running operators (``job=``, ``outputs=``).

Each is a pydantic model that an operator also takes as a dict (what a Param or a recipe passes). The
operator keeps the dict (``model_dump``), so Airflow renders the Jinja in its string values like any
templated field; the runner validates the rendered dict again before it builds the job.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from airflow_ml_provider.jobs.spec import KubernetesOptions, Resources, Scheduling


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
