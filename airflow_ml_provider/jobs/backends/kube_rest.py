"""REST addressing shared by the Kubernetes backends, the pod log reader and the watch."""

from __future__ import annotations

from typing import TYPE_CHECKING

import yaml

from airflow_ml_provider.jobs.naming import LABEL_PREFIX

if TYPE_CHECKING:  # the client itself is imported only by the backends that call the API
    from kubernetes.client.exceptions import ApiException

JOB_NAME_LABEL = f"{LABEL_PREFIX}/job-name"
OBJECT = {200: "object", 201: "object", 202: "object"}  # deserialize any success as plain dicts
_PLURALS = {"MPIJob": "mpijobs", "Job": "jobs", "Service": "services", "PodGroup": "podgroups"}


def resource_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = f"{base}/namespaces/{namespace}/{_PLURALS[kind]}"
    return f"{path}/{name}" if name else path


def api_message(exc: ApiException) -> str:
    """The API server's own explanation (e.g. which schema field was rejected)."""
    try:
        return yaml.safe_load(exc.body).get("message") or str(exc.reason)
    except Exception:  # noqa: BLE001 - any unparsable body: fall back to the status line
        return f"{exc.status} {exc.reason}"
