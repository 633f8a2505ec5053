"""Backends by name; imported lazily so that choosing one never imports the others' clients."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the local launcher imports this package at every job start: keep it light
    from airflow_ml_provider.jobs.backends.base import Backend

BACKENDS = {
    "local": "airflow_ml_provider.jobs.backends.local.backend:LocalBackend",
    "mpijob": "airflow_ml_provider.jobs.backends.kubernetes.mpijob:MPIJobBackend",
    "volcano": "airflow_ml_provider.jobs.backends.kubernetes.volcano:VolcanoBackend",
    "indexed-job": "airflow_ml_provider.jobs.backends.kubernetes.indexed_job:IndexedJobBackend",
    "trainjob": "airflow_ml_provider.jobs.backends.kubernetes.trainjob:TrainJobBackend",
}


def backends_for(framework: str) -> list[str]:
    """The backends that run ``framework`` (a Kubernetes backend lists its ``frameworks``; local runs all)."""
    names = []
    for name, path in BACKENDS.items():
        module, _, cls = path.partition(":")
        frameworks = getattr(getattr(import_module(module), cls), "frameworks", None)
        if frameworks is None or framework in {f.value for f in frameworks}:
            names.append(name)
    return names


def sharding_backends() -> list[str]:
    """The backends that run a sharded job (``TrainingJobSpec.shards``): those whose class says ``shards``."""
    return _backends_with("shards")


CLUSTER_SHARDING = "indexed-job"  # runs a cluster's sharded jobs: every cluster has its kind (no operator needed)


def sharding_backend(name: str) -> str:
    """Where a sharded job of a task whose jobs run on backend ``name`` runs: ``name`` when it runs sharded jobs;
    for another Kubernetes backend, ``CLUSTER_SHARDING`` (the same cluster and connection) once it runs them;
    else ``name``, which refuses the job naming the backends that run it. The Kubernetes backends are imported
    only for a Kubernetes backend's task (a local deployment may not have the kubernetes extra)."""
    if name == "local" or name not in BACKENDS:
        return name
    runs = sharding_backends()
    return name if name in runs or CLUSTER_SHARDING not in runs else CLUSTER_SHARDING


def role_backends() -> list[str]:
    """The backends that run a job of several roles (``TrainingJobSpec.roles``): those whose class says ``roles``."""
    return _backends_with("roles")


def _backends_with(feature: str) -> list[str]:
    names = []
    for name, path in BACKENDS.items():
        module, _, cls = path.partition(":")
        if getattr(getattr(import_module(module), cls), feature, False):
            names.append(name)
    return names


def get_backend(name: str, **config: Any) -> Backend:
    try:
        module, _, cls = BACKENDS[name].partition(":")
    except KeyError:
        raise ValueError(f"backend: unknown backend {name!r}; choose one of {sorted(BACKENDS)}") from None
    return getattr(import_module(module), cls)(**config)
