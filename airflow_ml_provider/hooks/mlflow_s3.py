"""MLflow artifacts on S3 written with an Airflow connection's credentials, not the environment.

MLflow's S3 artifact repository reads its credentials and endpoint from ``AWS_*`` /
``MLFLOW_S3_ENDPOINT_URL`` variables, which every process the task starts would inherit. Instead,
``ModelRegistryHook.mlflow()`` puts the artifact connection's values in a context variable, and the
repository registered here for ``s3://`` (MLflow's own, subclassed) builds its client from them.
A repository keeps the values it was created with, since MLflow caches repositories per run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache

_S3: ContextVar[dict[str, str] | None] = ContextVar("ml_registry_s3", default=None)


@contextmanager
def s3_client_settings(settings: dict[str, str] | None) -> Iterator[None]:
    """Inside the block, MLflow's S3 clients use ``settings`` (keys of MLflow's ``_get_s3_client``:
    ``access_key_id``, ``secret_access_key``, ``session_token``, ``region_name``, ``s3_endpoint_url``)."""
    if settings:
        _register()
    token = _S3.set(settings or None)
    try:
        yield
    finally:
        _S3.reset(token)


@cache
def _register() -> None:
    """Replace MLflow's ``s3`` artifact repository, once per process, by one that honours the block."""
    from mlflow.store.artifact.artifact_repository_registry import _artifact_repository_registry
    from mlflow.store.artifact.s3_artifact_repo import S3ArtifactRepository, _get_s3_client

    class ConnectionS3ArtifactRepository(S3ArtifactRepository):
        def __init__(self, artifact_uri: str, *args, **kwargs):
            super().__init__(artifact_uri, *args, **kwargs)
            self._connection_settings = _S3.get()

        def _get_s3_client(self):
            settings = _S3.get() or self._connection_settings
            return _get_s3_client(**settings) if settings else super()._get_s3_client()

    _artifact_repository_registry.register("s3", ConnectionS3ArtifactRepository)
