"""KServe ``InferenceService`` for a registered MLflow model: rendered here, applied by the caller."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from airflow_ml_provider.jobs.spec import DnsLabel
from airflow_ml_provider.patterns import DNS_LABEL_MAX

GROUP, VERSION, PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"
_NAME_BUDGET = 45  # KServe derives longer route and service names from it


class KServeTarget(BaseModel):
    """Where and how to serve: ``{"namespace", "name", "service_account", "min_replicas", "apply"}``.
    ``apply: false`` (the default) only renders the manifest, for review or GitOps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: Annotated[DnsLabel, Field(max_length=DNS_LABEL_MAX)] = "default"
    name: Annotated[DnsLabel, Field(max_length=_NAME_BUDGET)] | None = None
    service_account: DnsLabel | None = None
    min_replicas: Annotated[int, Field(ge=0)] = 1
    apply: bool = False


def service_name(model_name: str) -> str:
    """A DNS-1123 label derived from a registry model name."""
    name = re.sub(r"[^a-z0-9-]+", "-", model_name.lower()).strip("-")[:_NAME_BUDGET].rstrip("-")
    return name or "model"


def inference_service(
    target: KServeTarget, model_name: str, version: int, storage_uri: str, labels: dict[str, str]
) -> dict[str, Any]:
    """The manifest serving ``storage_uri`` (an MLflow model) with KServe's MLflow runtime (V2 protocol)."""
    predictor: dict[str, Any] = {
        "minReplicas": target.min_replicas,
        "model": {"modelFormat": {"name": "mlflow"}, "protocolVersion": "v2", "storageUri": storage_uri},
    }
    if target.service_account:
        predictor["serviceAccountName"] = target.service_account
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {
            "name": target.name or service_name(model_name),
            "namespace": target.namespace,
            "labels": labels,
            "annotations": {
                "ml.airflow.apache.org/registered-model": model_name,
                "ml.airflow.apache.org/model-version": str(version),
            },
        },
        "spec": {"predictor": predictor},
    }


def apply(api_client: Any, manifest: dict[str, Any]) -> str:
    """Create the InferenceService, or replace the spec of an existing one. Returns what was done."""
    from kubernetes.client import CustomObjectsApi
    from kubernetes.client.exceptions import ApiException

    api, metadata = CustomObjectsApi(api_client), manifest["metadata"]
    try:
        api.create_namespaced_custom_object(GROUP, VERSION, metadata["namespace"], PLURAL, manifest)
        return "created"
    except ApiException as exc:
        if exc.status != 409:
            raise
    api.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        metadata["namespace"],
        PLURAL,
        metadata["name"],
        {"metadata": {"annotations": metadata["annotations"]}, "spec": manifest["spec"]},
    )
    return "updated"
