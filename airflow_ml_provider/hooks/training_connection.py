"""The training connection's extras, read once into one typed object: every reader of the connection (the
backend, the artifact store, images, the log source) takes its values from here, and a value of the wrong
kind is refused naming its key (``extra.orphan_grace_s: ...``) before anything runs.

A key the connection does not know is ignored with a warning naming it (a misspelt ``backnd`` would else
silently run every job locally); an empty value (what the connection form sends for a field left blank)
means unset. What a value means to a backend (a namespace a DNS label, a backend one that exists) the
backend checks itself, when it is built from these values.
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

FRAMEWORK_IMAGES = ("image_horovod", "image_lightgbm", "image_pytorch", "image_xgboost", "image_generic")


class SecretRef(BaseModel):
    """A worker variable's value from a Kubernetes Secret's key."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    secret: str
    key: str


class TrainingConnection(BaseModel):
    """What the training connection's extras say (see ``TrainingBackendHook`` for each key's meaning)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    backend: str | None = None
    local_root: str | None = None
    local_image: str | None = None
    etcd: str | None = None
    orphan_grace_s: float | None = Field(default=None, gt=0)
    local_sandbox: Literal["auto", "required", "off"] | None = None
    kubernetes_conn_id: str | None = None
    namespace: str | None = None
    gang_scheduler: str | None = None
    queueing: Literal["kueue"] | None = None
    per_index_retries: Literal["on", "off"] | None = None
    training_runtime: str | None = None
    training_runtime_kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"] | None = None
    image: str | None = None
    image_horovod: str | None = None
    image_lightgbm: str | None = None
    image_pytorch: str | None = None
    image_xgboost: str | None = None
    image_generic: str | None = None
    artifact_root: str | None = None
    artifact_conn_id: str | None = None
    artifact_secret_env: dict[str, SecretRef] = Field(default_factory=dict)
    elasticsearch_conn_id: str | None = None
    data_roots: list[str] = Field(default_factory=list)

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("artifact_secret_env", mode="before")
    @classmethod
    def _no_refs(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("data_roots", mode="before")
    @classmethod
    def _roots(cls, value: Any) -> Any:
        """A list, or one comma-separated string (as the connection form and a URI give it)."""
        if value is None:
            return []
        return [root.strip() for root in value.split(",") if root.strip()] if isinstance(value, str) else value

    @classmethod
    def parse(cls, conn_id: str, extras: dict[str, Any]) -> TrainingConnection:
        """The extras of connection ``conn_id``, checked. Raises ValueError naming the connection and the key."""
        if unknown := sorted(set(extras) - set(cls.model_fields)):
            warnings.warn(f"connection {conn_id!r}: ignoring extra {', '.join(unknown)}: not a setting of the training "
                          f"connection (its settings: {', '.join(cls.model_fields)})", UserWarning, stacklevel=3)
        try:
            return cls.model_validate(extras)
        except ValidationError as exc:
            error = exc.errors()[0]
            key = ".".join(str(part) for part in error["loc"])
            raise ValueError(f"connection {conn_id!r}: extra.{key}: {error['msg']} (got {error['input']!r})") from None

    def images(self) -> dict[str, str]:
        """The images it sets: ``image`` and each ``image_<framework>``."""
        return {key: value for key in ("image", *FRAMEWORK_IMAGES) if (value := getattr(self, key))}
