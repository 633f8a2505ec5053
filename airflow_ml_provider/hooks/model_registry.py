"""The model marketplace: MLflow's Model Registry (versions, ``challenger``/``champion`` aliases).

MLflow is imported inside methods only, so DAG files that use the registry operators parse fast.

Credentials never go into ``os.environ`` (MLflow's documented way, which every process the task
starts would inherit, training workers included): inside ``mlflow()`` they live in a context
variable that a request header provider registered with MLflow turns into the ``Authorization``
header of MLflow's REST calls.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from airflow.sdk import BaseHook, conf
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_ml_provider.hooks import conn_types
from airflow_ml_provider.hooks.mlflow_s3 import s3_client_settings
from airflow_ml_provider.hooks.model_check import MODEL_SHA256, verify_model_file
from airflow_ml_provider.hooks.registry_lock import promotion_lock, sqlite_file, store_created
from airflow_ml_provider.patterns import MODEL_NAME

CHAMPION, CHALLENGER = "champion", "challenger"
LINEAGE_KEY = "airflow.lineage_key"
PREVIOUS_CHAMPION = "airflow.previous_champion"
# The model files the trainers write (runtime.predict loads them), and the framework whose image (environment) loads
# each: a Keras model needs TensorFlow; the parameter-server trainer's linear model (model.npz) numpy only.
TRAINED_BY = {".txt": "lightgbm", ".ubj": "xgboost", ".keras": "horovod", ".pt": "pytorch", ".npz": "generic"}
MODEL_FILES = tuple(TRAINED_BY)
_AUTHORIZATION: ContextVar[str | None] = ContextVar("ml_registry_authorization", default=None)


@dataclass(frozen=True)
class RegistrySettings:
    """Where MLflow tracks runs and registers models, and the UI that links point to."""

    tracking_uri: str
    registry_uri: str
    artifact_root: str | None
    ui_url: str
    authorization: str | None = field(default=None, repr=False)  # the Authorization header's value
    s3: dict[str, str] | None = field(default=None, repr=False)  # artifacts on S3: see hooks.mlflow_s3
    promotion_lock: str | None = None  # a tracking server's promotion lock: see hooks.registry_lock


@dataclass(frozen=True)
class Promotion:
    """What a compare-and-set of ``champion`` found: whether it moved, the champion it found (``alias_version``'s
    dict, or None) and the lock it held (for the task log)."""

    moved: bool
    champion: dict[str, Any] | None
    lock: str

    @property
    def previous(self) -> int | None:
        return self.champion["version"] if self.champion else None


class ModelRegistryHook(BaseHook):
    """MLflow tracking and registry. Without a connection, the embedded default: a SQLite store at
    ``$AIRFLOW_HOME/ml/mlflow.db`` with artifacts under the training connection's artifact root
    (``<artifact_root>/mlartifacts``; by default ``$AIRFLOW_HOME/ml/mlartifacts``). Artifacts on S3 are
    written with the credentials of the training connection's ``artifact_conn_id`` (hooks.mlflow_s3).

    Connection (type ``mlregistry``): host = tracking URI (``http://mlflow:5000``, ``databricks``,
    ``sqlite:///...``); login/password = basic auth; extras ``registry_uri``, ``artifact_root``
    (for new experiments), ``token``, ``ui_url`` (for links; default: an http tracking URI itself),
    ``promotion_lock`` (a tracking server's: see ``hooks.registry_lock``).
    """

    conn_name_attr = "registry_conn_id"
    default_conn_name = "ml_registry_default"
    conn_type = conn_types.REGISTRY
    hook_name = "ML Model Registry (MLflow)"

    def __init__(self, registry_conn_id: str = default_conn_name):
        super().__init__()
        self.registry_conn_id = registry_conn_id

    def settings(self) -> RegistrySettings:
        try:
            connection = conn_types.checked(self.get_connection(self.registry_conn_id))
        except AirflowNotFoundException:
            home = _home()
            home.mkdir(parents=True, exist_ok=True)
            uri = f"sqlite:///{home / 'mlflow.db'}"
            ui = conf.get("ml_training", "mlflow_ui_url", fallback="")
            store = _artifact_store()  # artifacts under the training connection's artifact_root
            location = store.mlflow_location()
            return RegistrySettings(uri, uri, location, ui, s3=store.mlflow_s3(location))
        extras = connection.extra_dejson
        tracking = connection.host or ""
        if "://" not in tracking and tracking != "databricks":
            tracking = f"{connection.schema or 'http'}://{tracking}" + (
                f":{connection.port}" if connection.port else ""
            )
        for name, uri in (("host", tracking), ("extra.registry_uri", extras.get("registry_uri") or "")):
            if "@" in urlsplit(uri).netloc:  # MLflow exports its URIs to the environment
                raise ValueError(f"connection {self.registry_conn_id!r}: {name} holds credentials; put them in "
                                 "login/password or the token extra")
        secrets = {"login": connection.login, "password": connection.password, "extra.token": extras.get("token")}
        for name, value in secrets.items():
            if value and any(character in value for character in "\r\n\x00"):  # would forge request headers
                raise ValueError(f"connection {self.registry_conn_id!r}: {name} contains a line break or NUL")
        return RegistrySettings(
            tracking_uri=tracking,
            registry_uri=extras.get("registry_uri") or tracking,
            artifact_root=extras.get("artifact_root"),
            ui_url=extras.get("ui_url") or (tracking if tracking.startswith("http") else ""),
            authorization=_authorization(connection.login, connection.password, extras.get("token")),
            s3=_artifact_store().mlflow_s3(extras.get("artifact_root")),
            promotion_lock=extras.get("promotion_lock") or None,
        )

    @contextmanager
    def mlflow(self) -> Iterator[Any]:
        """The ``mlflow`` module pointed at this registry (MLflow keeps one current URI per process).
        MLflow's REST calls made inside the block (in this thread, or a task or ``asyncio.to_thread``
        started from it) carry the connection's credentials; nothing is written to the environment."""
        import mlflow

        settings = self.settings()
        _register_authorization_header()
        mlflow.set_tracking_uri(settings.tracking_uri)
        mlflow.set_registry_uri(settings.registry_uri)
        token = _AUTHORIZATION.set(settings.authorization)
        try:
            with s3_client_settings(settings.s3):
                _create_stores(settings.tracking_uri, settings.registry_uri)
                yield mlflow
        finally:
            _AUTHORIZATION.reset(token)

    def experiment_id(self, name: str) -> str:
        """The experiment's id, creating it (under ``artifact_root``, if set) on first use: once, when two
        tasks do it at the same time."""
        with self.mlflow() as mlflow:
            client = mlflow.MlflowClient()
            if (experiment := client.get_experiment_by_name(name)) is not None:
                return experiment.experiment_id
            root = self.settings().artifact_root
            try:
                return client.create_experiment(name, artifact_location=root and f"{root.rstrip('/')}/{name}")
            except mlflow.exceptions.MlflowException as exc:  # another task created it first
                if exc.error_code != "RESOURCE_ALREADY_EXISTS" or not (made := client.get_experiment_by_name(name)):
                    raise
                return made.experiment_id

    def find_run(self, experiment_id: str, lineage_key: str) -> str | None:
        """The finished run already recorded for this lineage key (what makes re-runs idempotent)."""
        with self.mlflow() as mlflow:
            runs = mlflow.MlflowClient().search_runs(
                [experiment_id],
                f"tags.`{LINEAGE_KEY}` = '{_quoted(lineage_key)}' and attributes.status = 'FINISHED'",
                max_results=1,
            )
        return runs[0].info.run_id if runs else None

    def log_run(
        self,
        experiment_id: str,
        run_name: str,
        tags: dict[str, str],
        params: dict[str, Any],
        metrics: dict[str, float],
        history: list[dict[str, Any]],
        artifacts: list[Path],
    ) -> str:
        """Record one evaluated training: final metrics, the per-step series, files. Returns the run id."""
        with self.mlflow() as mlflow:
            with mlflow.start_run(experiment_id=experiment_id, run_name=run_name, tags=tags) as run:
                mlflow.log_params({k: str(v)[:500] for k, v in params.items()})
                mlflow.log_metrics(metrics)
                for row in history:
                    series = {f"train_{k}": float(v) for k, v in row.items() if k != "step" and _is_number(v)}
                    mlflow.log_metrics(series, step=int(row.get("step", 0)))
                for path in artifacts:
                    mlflow.log_artifact(str(path))
                return run.info.run_id

    def register(
        self,
        name: str,
        run_id: str,
        model_file: str,
        signature: Any,
        pip_requirements: list[str],
        tags: dict[str, str],
        description: str,
    ) -> int:
        """Register the run's model as a new version of ``name``, once: a version already made from
        this run is returned instead (a retried or re-run deploy adds nothing)."""
        from airflow_ml_provider.runtime import predict

        served_model = Path(predict.__file__).with_name("served_model.py")
        with self.mlflow() as mlflow:
            client = mlflow.MlflowClient()
            existing = client.search_model_versions(
                f"name = '{_quoted(name)}' and run_id = '{_quoted(run_id)}'"
            )
            if existing:
                return int(existing[0].version)
            metrics = client.get_run(run_id).data.metrics
            with mlflow.start_run(run_id=run_id):
                info = mlflow.pyfunc.log_model(
                    name="model",
                    python_model=str(served_model),
                    code_paths=[predict.__file__],
                    artifacts={"model": model_file},
                    signature=signature,
                    conda_env=_conda_env(pip_requirements),
                )
                mlflow.log_metrics(
                    {k: v for k, v in metrics.items() if not k.startswith("train_")}, model_id=info.model_id
                )
            version = mlflow.register_model(info.model_uri, name, tags=tags)
            if description:
                client.update_model_version(name, version.version, description=description)
            return int(version.version)

    def set_alias(self, name: str, alias: str, version: int) -> None:
        with self.mlflow() as mlflow:
            mlflow.MlflowClient().set_registered_model_alias(name, alias, str(version))

    def alias_version(self, name: str, alias: str) -> dict[str, Any] | None:
        """``{"version", "run_id", "tags", "metrics"}`` of the version holding ``alias``, or None."""
        with self.mlflow() as mlflow:
            client = mlflow.MlflowClient()
            try:
                version = client.get_model_version_by_alias(name, alias)
            except mlflow.exceptions.MlflowException:  # no such model or alias yet
                return None
            metrics = client.get_run(version.run_id).data.metrics if version.run_id else {}
            return {
                "version": int(version.version),
                "run_id": version.run_id,
                "tags": dict(version.tags),
                "metrics": metrics,
            }

    def model_file(self, name: str, version: int, directory: str) -> Path:
        """Download the trained model file that ``register`` stored in the version (``model.txt``,
        ``model.ubj``, ``model.keras``, ``model.pt`` or ``model.npz``) into ``directory``, checked against the version's
        ``airflow.model_sha256`` tag (raises ``ModelTampered`` otherwise); returns its path."""
        with self.mlflow() as mlflow:
            client = mlflow.MlflowClient()
            uri = client.get_model_version_download_uri(name, str(version)).rstrip("/") + "/artifacts"
            expected = client.get_model_version(name, str(version)).tags.get(MODEL_SHA256)
            local = Path(mlflow.artifacts.download_artifacts(uri, dst_path=directory))
        files = sorted(p for p in local.iterdir() if p.suffix in MODEL_FILES)
        if not files:
            raise LookupError(f"model {name!r} version {version}: no {' or '.join(MODEL_FILES)} file in its artifacts")
        verify_model_file(str(files[0]), expected, f"model {name!r} version {version}", f"{uri}/{files[0].name}")
        return files[0]

    def place_model_file(self, name: str, version: int, store: Any, directory: str) -> str:
        """Copy the version's model file into ``directory`` under the artifact ``store`` (where a job reads
        it); returns its location there."""
        import tempfile

        from airflow_ml_provider.artifact_layout import join
        from airflow_ml_provider.runtime import storage

        with tempfile.TemporaryDirectory(prefix="model-") as tmp:
            local = self.model_file(name, version, tmp)
            return storage.upload(str(local), store.locate(join(directory, local.name)))

    def input_width(self, name: str, version: int) -> int:
        """The number of features the version takes (its signature's), read without loading the model."""
        with self.mlflow() as mlflow:
            signature = mlflow.models.get_model_info(f"models:/{name}/{version}").signature
        return int(signature.inputs.inputs[0].shape[-1])

    def promote(self, name: str, version: int, expected: int | None) -> Promotion:
        """Compare-and-set ``champion``: move it to ``version`` only if it still is ``expected`` (the version the
        gate compared with; None: no champion), or already is ``version``. The check and the move run under the
        model's promotion lock (``hooks.registry_lock``), so two runs cannot both replace the same champion.
        The version replaced is noted on the new one (for rollback)."""
        settings = self.settings()
        with promotion_lock(settings.registry_uri, settings.promotion_lock, name, _home() / "locks") as lock:
            current = self.alias_version(name, CHAMPION)
            previous = current["version"] if current else None
            if previous not in (expected, version):
                return Promotion(False, current, lock)
            with self.mlflow() as mlflow:
                client = mlflow.MlflowClient()
                if previous is not None and previous != version:
                    client.set_model_version_tag(name, str(version), PREVIOUS_CHAMPION, str(previous))
                client.set_registered_model_alias(name, CHAMPION, str(version))
        return Promotion(True, current, lock)

    def rollback(self, name: str) -> int:
        """Move ``champion`` back to the version it replaced (under the promotion lock). Raises LookupError if
        there is none."""
        settings = self.settings()
        with promotion_lock(settings.registry_uri, settings.promotion_lock, name, _home() / "locks"):
            current = self.alias_version(name, CHAMPION)
            previous = current and current["tags"].get(PREVIOUS_CHAMPION)
            if not previous:
                raise LookupError(f"model {name!r}: the champion has no previous champion to roll back to")
            self.set_alias(name, CHAMPION, int(previous))
        return int(previous)

    def download_uri(self, name: str, version: int) -> str:
        """Where the version's model files are (what a serving runtime loads)."""
        with self.mlflow() as mlflow:
            return mlflow.MlflowClient().get_model_version_download_uri(name, str(version))

    def log_text(self, run_id: str, text: str, artifact_file: str) -> str:
        """Store ``text`` as an artifact of the run; returns its URI."""
        with self.mlflow() as mlflow:
            mlflow.MlflowClient().log_text(run_id, text, artifact_file)
            return f"{mlflow.MlflowClient().get_run(run_id).info.artifact_uri}/{artifact_file}"

    def run_url(self, experiment_id: str, run_id: str) -> str:
        """The run's page in the MLflow UI ("" without a UI to link to)."""
        return run_page(self.settings().ui_url, experiment_id, run_id)

    def version_url(self, name: str, version: int) -> str:
        ui = self.settings().ui_url.rstrip("/")
        return f"{ui}/#/models/{name}/versions/{version}" if ui else ""


def run_page(ui_url: str, experiment_id: str, run_id: str) -> str:
    """A run's page in the MLflow UI at ``ui_url`` ("" without one)."""
    ui = ui_url.rstrip("/")
    return f"{ui}/#/experiments/{experiment_id}/runs/{run_id}" if ui and run_id else ""


def _conda_env(pip_requirements: list[str]) -> dict[str, Any]:
    """The model's environment, given whole: left to MLflow, it is derived from this (Airflow)
    environment, which has no pip by design (uv), and every registration warned "Failed to resolve
    installed pip version". Serving installs ``pip_requirements`` with the environment's own pip."""
    import platform

    return {"name": "mlflow-env", "channels": ["conda-forge"],
            "dependencies": [f"python={platform.python_version()}", "pip", {"pip": list(pip_requirements)}]}


def check_model_name(name: str, allowed: Sequence[str] | None, dag_id: str) -> str:
    """``name`` if this DAG may write it, else ValueError naming the ``model_name`` field.

    A DAG writes only its own model names: those its author lists in ``allowed`` (exact names or
    ``fnmatch`` patterns such as ``"my_dag.*"``), else the name derived from the DAG, its id. A UI
    user's Param therefore chooses among the author's names and can never reach another team's model.
    """
    patterns = list(allowed) if allowed else [dag_id]
    if not isinstance(name, str) or not re.search(MODEL_NAME, name):
        raise ValueError(f"model_name: {name!r} is not a model name (letters, digits, '_', '.', '-'; at most 100)")
    if not any(fnmatchcase(name, pattern) for pattern in patterns):
        raise ValueError(
            f"model_name: {name!r} is not one of the model names DAG {dag_id!r} may write "
            f"({', '.join(patterns)})"
        )
    return name


def _home() -> Path:
    """The provider's folder under ``$AIRFLOW_HOME``: the embedded registry and machine-local locks."""
    return Path(os.environ.get("AIRFLOW_HOME", "~/airflow")).expanduser() / "ml"


@cache
def _create_stores(*uris: str) -> None:
    """Create (or check) each SQLite store once per process, under its creation lock, before MLflow's first
    use of it: MLflow creates a fresh store's tables on first use, and two tasks doing that at once both fail.
    Other stores are created by their server or by ``mlflow db upgrade``."""
    from mlflow import MlflowClient

    for uri in dict.fromkeys(uri for uri in uris if sqlite_file(uri)):
        with store_created(uri):
            client = MlflowClient(tracking_uri=uri, registry_uri=uri)
            client.search_experiments(max_results=1)  # the tracking store's tables
            client.search_registered_models(max_results=1)  # the registry's (the same database)


def _artifact_store():
    """The training connection's artifact store (its ``local`` default when nothing is configured)."""
    from airflow_ml_provider.hooks.training_backend import TrainingBackendHook

    return TrainingBackendHook().artifact_store("local")


def _authorization(login: str | None, password: str | None, token: str | None) -> str | None:
    """The header MLflow would build from its credential variables (basic auth first, as MLflow does)."""
    if login and password:
        return "Basic " + base64.standard_b64encode(f"{login}:{password}".encode()).decode()
    return f"Bearer {token}" if token else None


@cache
def _register_authorization_header() -> None:
    """Add, once per process, the provider that gives MLflow's requests the current block's credentials."""
    from mlflow.tracking.request_header.abstract_request_header_provider import RequestHeaderProvider
    from mlflow.tracking.request_header.registry import _request_header_provider_registry

    class RegistryAuthorization(RequestHeaderProvider):
        def in_context(self) -> bool:
            return _AUTHORIZATION.get() is not None

        def request_headers(self) -> dict[str, str]:
            return {"Authorization": _AUTHORIZATION.get()}

    _request_header_provider_registry.register(RegistryAuthorization)


def _quoted(value: str) -> str:
    """A value for an MLflow search filter; quotes cannot be escaped there, so they are refused."""
    if "'" in value or "\\" in value:
        raise ValueError(f"{value!r}: quotes and backslashes are not allowed in model names and keys")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
