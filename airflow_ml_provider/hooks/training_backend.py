"""The training cluster connection: which backend a task uses by default, and how to reach it."""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.base import Backend


class TrainingBackendHook(BaseHook):
    """Builds the backend a task runs on. With no connection defined, the embedded default applies:
    the local backend under ``$AIRFLOW_HOME/ml``, workers using this interpreter's environment or
    the environment in ``AIRFLOW_ML_LOCAL_IMAGE``.

    Connection extras: ``backend`` (default backend name), ``local_root``, ``local_image``.
    """

    conn_name_attr = "ml_conn_id"
    default_conn_name = "ml_training_default"
    conn_type = "ml_training"
    hook_name = "ML Training Backend"

    def __init__(self, ml_conn_id: str = default_conn_name):
        super().__init__()
        self.ml_conn_id = ml_conn_id

    def extras(self) -> dict[str, Any]:
        try:
            return self.get_connection(self.ml_conn_id).extra_dejson
        except AirflowNotFoundException:
            return {}

    def get_backend(self, name: str | None = None) -> Backend:
        extras = self.extras()
        name = name or extras.get("backend") or "local"
        if name == "local":
            airflow_home = os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow"))
            return get_backend(
                "local",
                root=extras.get("local_root") or os.path.join(airflow_home, "ml"),
                image=extras.get("local_image") or os.environ.get("AIRFLOW_ML_LOCAL_IMAGE") or None,
            )
        return get_backend(name, **extras.get(f"{name}_config", {}))
