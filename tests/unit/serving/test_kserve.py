"""The KServe InferenceService rendered for a registered model version."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from airflow_ml_provider.serving.kserve import KServeTarget, inference_service, service_name


def test_manifest_serves_the_model_version_with_the_mlflow_runtime():
    target = KServeTarget(namespace="models", service_account="serving", min_replicas=2)
    manifest = inference_service(
        target, "Churn_Model.v2", 7, "s3://bucket/models/m-1/artifacts", {"team": "ml"}
    )
    assert manifest["apiVersion"] == "serving.kserve.io/v1beta1" and manifest["kind"] == "InferenceService"
    assert manifest["metadata"]["name"] == "churn-model-v2" and manifest["metadata"]["namespace"] == "models"
    assert manifest["metadata"]["annotations"]["ml.airflow.apache.org/model-version"] == "7"
    predictor = manifest["spec"]["predictor"]
    assert predictor["model"] == {
        "modelFormat": {"name": "mlflow"},
        "protocolVersion": "v2",
        "storageUri": "s3://bucket/models/m-1/artifacts",
    }
    assert (predictor["minReplicas"], predictor["serviceAccountName"]) == (2, "serving")


def test_service_names_are_dns_labels():
    assert service_name("___") == "model"
    assert len(service_name("x" * 100)) == 45


@pytest.mark.parametrize(
    "fields", [{"namespace": "Bad_NS"}, {"name": "UPPER"}, {"min_replicas": -1}, {"replicas": 1}]
)
def test_invalid_targets_are_refused(fields):
    with pytest.raises(ValidationError):
        KServeTarget(**fields)
