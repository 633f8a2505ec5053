"""The artifact root seen from Airflow: ``ObjectStoragePath`` with the configured connection's
credentials, and what a job's workers need to reach the same place.

Workers never get credentials from the Airflow process's environment. On Kubernetes they use the
pod's identity (IRSA, Workload Identity) or Secret references (``kubernetes.secret_env``, or the
training connection's ``artifact_secret_env`` extra); only non-secret settings (an S3 endpoint, a
region) are written into the manifest. The local backend hands a job the values of the
``artifact_conn_id`` connection as secrets: in the workers' environment, never in ``job.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_ml_provider.artifact_layout import is_remote, join, mlflow_dir, scheme

# The variables s3fs/boto3 (workers) and MLflow's S3 client read; endpoint and region are not secret.
S3_ENDPOINT_ENV = "AWS_ENDPOINT_URL_S3"
S3_REGION_ENV = "AWS_DEFAULT_REGION"
S3_CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


class ArtifactStoreError(ValueError):
    """The artifact root or its connection cannot serve the job; the message names the setting."""


@dataclass(frozen=True)
class ArtifactStore:
    """``root``: a local/mounted path or an object-store URL; ``conn_id``: the Airflow connection
    (``aws`` for ``s3://``, ``google_cloud_platform`` for ``gs://``) holding its credentials, or None
    for the storage library's own defaults (instance/pod identity)."""

    root: str
    conn_id: str | None = None

    @property
    def remote(self) -> bool:
        return is_remote(self.root)

    def url(self, *parts: str) -> str:
        """A location under the root as a plain string (what jobs and XCom carry)."""
        return join(self.root, *parts)

    def path(self, *parts: str):
        """An ``ObjectStoragePath`` under the root, reading and writing with the connection's credentials."""
        from airflow.sdk import ObjectStoragePath

        location = self.url(*parts)
        if self.remote and self.conn_id:
            return ObjectStoragePath(location, conn_id=self.conn_id)
        return ObjectStoragePath(location)

    def locate(self, location: str):
        """An ``ObjectStoragePath`` for a location a job reported (a model file): on the root's object
        store it is read with the root's connection, elsewhere as it is (a local or mounted path)."""
        from airflow.sdk import ObjectStoragePath

        if self.remote and self.conn_id and scheme(location) == scheme(self.root):
            return ObjectStoragePath(location, conn_id=self.conn_id)
        return ObjectStoragePath(location)

    def describe(self) -> str:
        """The root and the connection it is reached through, for messages (no credential in either)."""
        through = f"connection {self.conn_id!r}" if self.conn_id else "the storage library's default credentials"
        return f"artifact_root {self.root!r} (through {through})"

    def check(self) -> None:
        """Fail early, naming the root and the connection, when an object-store root cannot be used: its
        bucket is missing, the credentials are refused, or the endpoint is down. Reads the bucket's
        metadata only; a local root is left to the job (it may be a volume only the pods mount).

        Raises:
            ArtifactStoreError: naming the root, the connection and the store's answer.
        """
        if not self.remote:
            return
        from airflow_ml_provider.runtime import storage

        fs, path = storage.resolve(self.path())
        bucket = path.split("/", 1)[0]
        try:
            fs.info(bucket)
        except Exception as exc:  # noqa: BLE001 - every store's errors differ; each is reported the same way
            raise ArtifactStoreError(
                f"{self.describe()} cannot be used: {type(exc).__name__}: {_first_line(exc)}. Check that bucket "
                f"{bucket!r} exists, that the connection's credentials may read it, and that its endpoint "
                "(endpoint_url) is reachable"
            ) from None

    def worker_settings(self) -> dict[str, str]:
        """Non-secret variables the workers need: the S3 endpoint and region from the connection."""
        if scheme(self.root) != "s3" or not self.conn_id:
            return {}
        hook = self._aws_hook()
        endpoint = hook.conn_config.get_service_endpoint_url(service_name="s3")
        region = hook.conn_config.region_name
        return {k: v for k, v in ((S3_ENDPOINT_ENV, endpoint), (S3_REGION_ENV, region)) if v}

    def worker_credentials(self) -> dict[str, str]:
        """The connection's credentials as the variables S3 clients read, for the local backend to hand
        to a job explicitly. Empty without a connection (workers then use their own identity).

        Raises:
            ArtifactStoreError: the root's store has no credential hand-off (only ``s3://`` has one).
        """
        if not self.remote or not self.conn_id:
            return {}
        if scheme(self.root) != "s3":
            raise ArtifactStoreError(
                f"artifact_conn_id: handing {scheme(self.root)}:// credentials to local workers is not "
                f"supported (only s3://); leave artifact_conn_id unset so workers use their own identity"
            )
        credentials = self._aws_hook().get_credentials()
        values = (credentials.access_key, credentials.secret_key, credentials.token)
        return {name: value for name, value in zip(S3_CREDENTIAL_ENV, values) if value}

    def mlflow_location(self) -> str:
        """Where the embedded MLflow registry keeps its artifacts: ``<root>/mlartifacts`` as a URI."""
        location = mlflow_dir(self.root)
        return location if self.remote else Path(location).as_uri()

    def mlflow_s3(self, mlflow_root: str | None) -> dict[str, str] | None:
        """MLflow's S3 client settings (see hooks.mlflow_s3) to write under ``mlflow_root`` with this
        store's connection: None unless both are on S3 and a connection is configured."""
        if scheme(mlflow_root or "") != "s3" or scheme(self.root) != "s3" or not self.conn_id:
            return None
        names = {S3_ENDPOINT_ENV: "s3_endpoint_url", S3_REGION_ENV: "region_name", "AWS_ACCESS_KEY_ID": "access_key_id",
                 "AWS_SECRET_ACCESS_KEY": "secret_access_key", "AWS_SESSION_TOKEN": "session_token"}
        values = {**self.worker_settings(), **self.worker_credentials()}
        return {names[name]: value for name, value in values.items()}

    def _aws_hook(self):
        from airflow.providers.amazon.aws.hooks.base_aws import AwsGenericHook

        return AwsGenericHook(aws_conn_id=self.conn_id, client_type="s3")


@dataclass(frozen=True)
class JobEnvironment:
    """What a job's workers need to reach the artifact root, split by sensitivity.

    Args:
        env: plain variables (S3 endpoint, region): fine in a manifest or a job record.
        secret_env: Kubernetes Secret references, ``{"VAR": {"secret": name, "key": key}}``: rendered as
            ``secretKeyRef``s, so no value passes through Airflow.
        secrets: credential values for the local backend only (``LocalBackend.submit(secrets=...)``):
            in the workers' environment, never in ``job.json`` or a log.
    """

    env: dict[str, str] = field(default_factory=dict)
    secret_env: dict[str, Any] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)

    def submit_kwargs(self) -> dict[str, Any]:
        """Extra arguments for ``Backend.submit``: the local backend's ``secrets``, when there are any."""
        return {"secrets": self.secrets} if self.secrets else {}

    def merged_env(self, own: dict[str, str] | None) -> dict[str, str]:
        """The task's own ``env`` over these settings (the task's values win)."""
        return {**self.env, **(own or {})}

    def merged_kubernetes(self, own) -> dict[str, Any]:
        """The task's ``kubernetes`` options (dict or KubernetesOptions) with these Secret references
        added under ``secret_env`` (the task's own references win)."""
        options = own.model_dump() if hasattr(own, "model_dump") else dict(own or {})
        return {**options, "secret_env": {**self.secret_env, **(options.get("secret_env") or {})}}


def _first_line(exc: BaseException) -> str:
    """An error's message cut to its first line and 500 characters (a store's answer can be long)."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else "no message")[:500]
