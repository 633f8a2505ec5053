"""The training cluster connection: which backend a task uses by default, and how to reach it."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.base import Backend


class TrainingBackendHook(BaseHook):
    """Builds the backend a task runs on. With no connection defined, the embedded default applies:
    the local backend under ``$AIRFLOW_HOME/ml``, workers using this interpreter's environment or
    the environment in ``AIRFLOW_ML_LOCAL_IMAGE``.

    Connection extras: ``backend`` (default backend name), ``local_root``, ``local_image``, ``etcd`` (the
    local backend's store of elastic worker slots; default ``$AIRFLOW_ML_ETCD``), and for the
    Kubernetes backends ``kubernetes_conn_id`` (a cncf-kubernetes connection: kubeconfig, in-cluster,
    context; default ``kubernetes_default``) and ``namespace``.
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
                etcd=extras.get("etcd"),
            )
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        kubernetes = KubernetesHook(conn_id=self.kubernetes_conn_id(extras))
        namespace = extras.get("namespace") or kubernetes.get_namespace() or "default"
        return get_backend(name, api_client=kubernetes.api_client, namespace=namespace)

    def kubernetes_conn_id(self, extras: dict[str, Any] | None = None) -> str:
        extras = self.extras() if extras is None else extras
        return extras.get("kubernetes_conn_id") or "kubernetes_default"

    def async_api_factory(self) -> Callable[[], Any]:
        """Opens an async Kubernetes API client from the same connection (for watches in the triggerer)."""
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        conn_id = self.kubernetes_conn_id()
        return lambda: AsyncKubernetesHook(conn_id=conn_id).get_conn()
