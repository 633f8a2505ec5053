"""The training cluster connection: which backend a task uses by default, and how to reach it."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk import BaseHook, conf
from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException

from airflow_ml_provider.artifact_layout import check_root, data_dir, job_artifact_dir
from airflow_ml_provider.hooks import conn_types
from airflow_ml_provider.hooks.artifact_store import (
    S3_ENDPOINT_ENV,
    ArtifactStore,
    ArtifactStoreError,
    JobEnvironment,
)
from airflow_ml_provider.hooks.training_connection import TrainingConnection
from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.base import Backend
from airflow_ml_provider.jobs.backends.local.sandbox import SandboxLimits, sqlite_files


class TrainingBackendHook(BaseHook):
    """Builds the backend a task runs on. With no connection defined, the embedded default applies:
    the local backend under ``$AIRFLOW_HOME/ml``, workers using this interpreter's environment or
    the environment in ``AIRFLOW_ML_LOCAL_IMAGE``.

    Connection extras: ``backend`` (default backend name), ``local_root``, ``local_image``, ``etcd`` (the
    local backend's store of elastic worker slots; default ``$AIRFLOW_ML_ETCD``), ``orphan_grace_s`` (a
    local job no follower has heartbeated for this long is stopped; default 600), ``local_sandbox``
    (``auto``, the default: each local job in a bubblewrap sandbox where it works; ``required``; ``off``),
    and for the
    Kubernetes backends ``kubernetes_conn_id`` (a cncf-kubernetes connection: kubeconfig, in-cluster,
    context; default ``kubernetes_default``), ``namespace``, ``gang_scheduler`` (the MPI operator's
    ``--gang-scheduling`` setting, if it has one), ``queueing`` (``kueue`` where Kueue admits the jobs),
    ``per_index_retries`` (``on``/``off``: whether the Job controller retries each shard of an indexed-job sharded
    job; unset, by the server's version) and,
    for ``trainjob``, ``training_runtime`` and ``training_runtime_kind`` (the runtime a TrainJob names).

    Artifacts (``artifact_root`` extra, else ``[ml_training] artifact_root``, else the local root
    ``$AIRFLOW_HOME/ml`` for local jobs): a local/mounted path or ``s3://``/``gs://`` URL under which
    every job keeps its model, checkpoints and data (see ``airflow_ml_provider.artifact_layout``);
    ``artifact_conn_id`` names the aws/google connection for it; ``artifact_secret_env`` maps worker
    variables to Kubernetes Secret keys (``{"AWS_ACCESS_KEY_ID": {"secret": "s3", "key": "id"}}``).
    Images for the Kubernetes backends: ``image_<framework>`` (``image_horovod``, ``image_lightgbm``,
    ``image_pytorch``, ``image_xgboost``, ``image_generic``), else ``image``. ``data_roots``: see :meth:`data_roots`.
    """

    conn_name_attr = "ml_conn_id"
    default_conn_name = "ml_training_default"
    conn_type = conn_types.TRAINING
    hook_name = "ML Training Backend"

    def __init__(self, ml_conn_id: str = default_conn_name):
        super().__init__()
        self.ml_conn_id = ml_conn_id

    def settings(self) -> TrainingConnection:
        """The connection's extras, checked (none defined: every default). Raises ValueError naming the key."""
        try:
            extras = conn_types.checked(self.get_connection(self.ml_conn_id)).extra_dejson
        except AirflowNotFoundException:
            extras = {}
        return TrainingConnection.parse(self.ml_conn_id, extras)

    def backend_name(self, name: str | None = None, settings: TrainingConnection | None = None) -> str:
        """``name``, else the connection's default backend, else ``local``."""
        settings = self.settings() if settings is None else settings
        return name or settings.backend or "local"

    def data_roots(self) -> list[str]:
        """The folders a Param may read data from (``data_path``): the ``data_roots`` extra (a list, or
        comma-separated), else ``[ml_training] data_roots`` (comma-separated), else ``$AIRFLOW_HOME/data``
        and the local root's ``data`` folder (where runs keep their prepared data)."""
        settings = self.settings()
        roots = settings.data_roots or [root.strip() for root in conf.get("ml_training", "data_roots", fallback="")
                                        .split(",") if root.strip()]
        if roots:
            return roots
        airflow_home = os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow"))
        return [os.path.join(airflow_home, "data"), os.path.join(self._local_root(settings), "data")]

    def local_images(self) -> list[str]:
        """The Python environments a Param may pick on the local backend: the ``local_image`` extra,
        ``$AIRFLOW_ML_LOCAL_IMAGE`` and ``[ml_training] local_images`` (comma-separated)."""
        listed = conf.get("ml_training", "local_images", fallback="").split(",")
        return [image.strip() for image in (self.settings().local_image, os.environ.get("AIRFLOW_ML_LOCAL_IMAGE"),
                                            *listed) if image and image.strip()]

    def job_setup(self, backend: str | Backend | None = None) -> JobSetup:
        """How a job runs here, from one read of the connection: its backend (``backend``: a name, else the
        connection's; or a backend already built), where its artifacts live, what its workers need to reach
        them (not checked yet: :meth:`JobSetup.checked`), its default image and its log's Elasticsearch
        connection. A task asks this once per try; a search once for all its trials."""
        settings = self.settings()
        if not isinstance(backend, Backend):
            backend = self._backend(backend, settings)
        store = self._artifact_store(backend.name, settings)
        return JobSetup(
            conn_id=self.ml_conn_id, backend=backend, store=store, artifact_dir=self._artifact_dirs(backend, settings),
            environment=self._environment(backend.name, store, settings), images=settings.images(),
            logs_conn_id=settings.elasticsearch_conn_id,
        )

    def get_backend(self, name: str | None = None) -> Backend:
        return self._backend(name, self.settings())

    def _backend(self, name: str | None, settings: TrainingConnection) -> Backend:
        name = self.backend_name(name, settings)
        if name == "local":
            return get_backend(
                "local",
                root=self._local_root(settings),
                image=settings.local_image or os.environ.get("AIRFLOW_ML_LOCAL_IMAGE") or None,
                etcd=settings.etcd,
                **({"orphan_grace_s": settings.orphan_grace_s} if settings.orphan_grace_s else {}),
                max_workers=conf.getint("ml_training", "local_max_workers", fallback=0) or None,
                **({"sandbox": settings.local_sandbox} if settings.local_sandbox else {}),
                hide=airflow_private_paths(),
                limits=self._sandbox_limits(settings),
            )
        from airflow_ml_provider.hooks.kubernetes_cluster import cluster

        reached = cluster(self.kubernetes_conn_id(settings))
        namespace = settings.namespace or reached.namespace or "default"
        backend = get_backend(name, api_client=reached.api, namespace=namespace,
                              async_api_factory=self.async_api_factory(settings),
                              watch_key=self.kubernetes_conn_id(settings), gang_scheduler=settings.gang_scheduler,
                              queueing=settings.queueing, **_trainjob_options(name, settings),
                              **_indexed_job_options(name, settings))
        backend.where = f"{reached.where}, namespace {namespace}"
        return backend

    def _sandbox_limits(self, settings: TrainingConnection) -> SandboxLimits:
        """Each sandboxed local job's bounds (``[ml_training] local_job_*``) and the endpoints it may reach: the
        configured ones and the artifact store's S3 endpoint, when it has one.

        Raises:
            AirflowFailException: naming the setting (a bound below 1, an endpoint that is not host:port).
        """
        read = {"memory_mb": conf.getint("ml_training", "local_job_memory_mb", fallback=0),
                "max_processes": conf.getint("ml_training", "local_job_max_processes", fallback=0),
                "tmp_mb": conf.getint("ml_training", "local_job_tmp_mb", fallback=0)}
        bounds = {name: value for name, value in read.items() if value}  # unset (0): SandboxLimits' own default
        egress = [e.strip() for e in conf.get("ml_training", "local_job_egress", fallback="").split(",") if e.strip()]
        store = self._artifact_store("local", settings)
        if store is not None and (endpoint := store.worker_settings().get(S3_ENDPOINT_ENV)):
            egress.append(endpoint)
        try:
            return SandboxLimits(**bounds, egress=tuple(egress))
        except ValueError as exc:
            raise AirflowFailException(f"[ml_training] {exc}") from None

    def artifact_store(self, backend: str | None = None) -> ArtifactStore | None:
        """Where jobs on ``backend`` keep artifacts. None for a cluster backend with no root configured
        (its pods cannot see this machine's disk), so its jobs get no default directories."""
        return self._artifact_store(backend, self.settings())

    def _artifact_store(self, backend: str | None, settings: TrainingConnection) -> ArtifactStore | None:
        root = settings.artifact_root or conf.get("ml_training", "artifact_root", fallback=None)
        if not root:
            if (backend or settings.backend or "local") != "local":
                return None
            root = self._local_root(settings)
        try:
            root = check_root(root)
        except ValueError as exc:
            raise AirflowFailException(f"connection {self.ml_conn_id}: {exc}") from None
        return ArtifactStore(root, settings.artifact_conn_id)

    def run_data_dir(self, dag_id: str, run_id: str, backend: str | None = None) :
        """Where a DAG run keeps its data shards: ``<artifact_root>/data/<dag_id>/<run key>``
        (``[ml_training] data_root``, if set, replaces ``<artifact_root>/data``).

        Raises:
            ArtifactStoreError: a cluster backend with no artifact root (its pods cannot read this disk), or
                an object-store root that cannot be used (``ArtifactStore.check``).
        """
        from airflow.sdk import ObjectStoragePath

        key = hashlib.sha256(run_id.encode()).hexdigest()[:12]
        if legacy := conf.get("ml_training", "data_root", fallback=None):
            return ObjectStoragePath(legacy) / dag_id / key
        store = self.artifact_store(backend or None)
        if store is None:
            raise ArtifactStoreError(
                f"backend {backend or self.settings().backend!r} has no artifact_root: set the "
                f"{self.ml_conn_id} connection's artifact_root extra (s3://..., gs://... or a path mounted in "
                "every pod) so that its jobs can read the data this run prepares"
            )
        store.check()
        return store.locate(data_dir(store.root, dag_id, key))

    def _artifact_dirs(self, backend: Backend, settings: TrainingConnection) -> Callable[[str], str | None]:
        if settings.artifact_root or conf.get("ml_training", "artifact_root", fallback=None):
            root = self._artifact_store(backend.name, settings).root
            return lambda name: job_artifact_dir(root, name)
        return backend.default_artifact_dir

    def _environment(self, backend: str, store: ArtifactStore | None, settings: TrainingConnection) -> JobEnvironment:
        if store is None:
            return JobEnvironment()
        try:
            if backend == "local":
                return JobEnvironment(env=store.worker_settings(), secrets=store.worker_credentials())
            return JobEnvironment(env=store.worker_settings(), secret_env={
                name: ref.model_dump() for name, ref in settings.artifact_secret_env.items()})
        except ArtifactStoreError as exc:
            raise AirflowFailException(f"connection {self.ml_conn_id}: {exc}") from None

    def _local_root(self, settings: TrainingConnection) -> str:
        airflow_home = os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow"))
        return settings.local_root or os.path.join(airflow_home, "ml")

    def kubernetes_conn_id(self, settings: TrainingConnection | None = None) -> str:
        settings = self.settings() if settings is None else settings
        return settings.kubernetes_conn_id or "kubernetes_default"

    def async_api_factory(self, settings: TrainingConnection | None = None) -> Callable[[], Any]:
        """Opens an async Kubernetes API client from the same connection (for watches in the triggerer)."""
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        conn_id = self.kubernetes_conn_id(settings)
        return lambda: AsyncKubernetesHook(conn_id=conn_id).get_conn()


def image_for(images: dict[str, str], backend: str, framework: str) -> str | None:
    """A cluster backend's image for ``framework``: ``image_<framework>``, else ``image``; locally None."""
    if backend == "local":
        return None
    return images.get(f"image_{framework}") or images.get("image") or None


def _trainjob_options(backend: str, settings: TrainingConnection) -> dict[str, str]:
    """The runtime a TrainJob names, for the ``trainjob`` backend only (where the connection sets it)."""
    if backend != "trainjob":
        return {}
    runtime = {"training_runtime": settings.training_runtime, "training_runtime_kind": settings.training_runtime_kind}
    return {key: value for key, value in runtime.items() if value}


def _indexed_job_options(backend: str, settings: TrainingConnection) -> dict[str, bool]:
    """Whether the cluster retries each shard itself, for the ``indexed-job`` backend only (where the connection
    says it; unset, the backend asks the API server's version)."""
    if backend != "indexed-job" or settings.per_index_retries is None:
        return {}
    return {"per_index_retries": settings.per_index_retries == "on"}


def _check(store: ArtifactStore | None, conn_id: str) -> None:
    """``ArtifactStore.check`` for a store reached through a connection, failing the task naming both."""
    if store is None or not store.conn_id:
        return
    try:
        store.check()
    except ArtifactStoreError as exc:
        raise AirflowFailException(f"connection {conn_id}: {exc}") from None


@dataclass
class JobSetup:
    """How jobs run through one training connection, as read once (``TrainingBackendHook.job_setup``).

    Args:
        conn_id: the training connection.
        backend: the backend jobs run on.
        store: their artifact store (None: a cluster backend with no artifact root).
        artifact_dir: job name -> its directory (model/, checkpoints/ below it), or None.
        environment: what the workers need to reach the artifact root (see JobEnvironment).
        images: the connection's ``image``/``image_<framework>`` extras.
        logs_conn_id: the connection's ``elasticsearch_conn_id`` extra.
    """

    conn_id: str
    backend: Backend
    store: ArtifactStore | None
    artifact_dir: Callable[[str], str | None]
    environment: JobEnvironment
    images: dict[str, str] = field(default_factory=dict)
    logs_conn_id: str | None = None
    _checked: bool = False

    def image(self, framework: str) -> str | None:
        """The default image of a job of ``framework`` on this backend (locally None: ``local_image``)."""
        return image_for(self.images, self.backend.name, framework)

    def checked(self) -> JobEnvironment:
        """The environment, once the artifact store was found usable (``ArtifactStore.check``: a wrong
        bucket, refused credentials or a down endpoint fail the task before any job starts); checked once."""
        if not self._checked:
            _check(self.store, self.conn_id)
            self._checked = True
        return self.environment


def airflow_private_paths() -> list[str]:
    """Where this Airflow keeps what no job may read, wherever its configuration puts it: a SQLite metadata
    DB, the task logs, and the files of a local secrets backend (``[secrets] backend_kwargs``'s
    ``*_file_path``). The local backend hides them from sandboxed jobs, as it hides ``$AIRFLOW_HOME``."""
    paths = [conf.get("logging", "base_log_folder", fallback=""),
             *sqlite_files(conf.get("database", "sql_alchemy_conn", fallback="") or "")]
    try:
        kwargs = json.loads(conf.get("secrets", "backend_kwargs", fallback="") or "{}")
    except ValueError:
        kwargs = {}
    if isinstance(kwargs, dict):
        paths += [value for key, value in kwargs.items() if key.endswith("_file_path") and isinstance(value, str)]
    return [path for path in paths if path and os.path.isabs(path)]
