"""The KServe deploy target applied to a real kube-apiserver: created once, then updated in place.

KServe itself cannot be installed here, so its InferenceService CRD is registered with an open
schema: this checks the API calls (create, conflict -> merge patch), not KServe's validation.
"""

from __future__ import annotations

import time

import pytest

from airflow_ml_provider.serving.kserve import KServeTarget, apply, inference_service

pytestmark = pytest.mark.integration

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "inferenceservices.serving.kserve.io"},
    "spec": {
        "group": "serving.kserve.io",
        "scope": "Namespaced",
        "names": {"plural": "inferenceservices", "singular": "inferenceservice", "kind": "InferenceService"},
        "versions": [
            {
                "name": "v1beta1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def kserve_crd(kube_cluster):
    from kube_cluster import ApiError

    try:
        kube_cluster.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)
    except ApiError as exc:
        if exc.status != 409:
            raise
    for _ in range(100):
        crd = kube_cluster.request(
            "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD['metadata']['name']}"
        )
        if any(
            c["type"] == "Established" and c["status"] == "True"
            for c in (crd.get("status") or {}).get("conditions") or []  # null until the server fills them in
        ):
            time.sleep(1)  # discovery catches up
            return
        time.sleep(0.2)
    raise RuntimeError("the InferenceService CRD was not established")


def test_inference_service_is_created_then_moved_to_the_new_version(kube_cluster, kserve_crd, namespace):
    target, labels = (
        KServeTarget(namespace=namespace),
        {"app.kubernetes.io/managed-by": "airflow-ml-provider"},
    )
    client = kube_cluster.api_client()
    assert (
        apply(client, inference_service(target, "Churn", 1, "s3://models/m-1/artifacts", labels)) == "created"
    )
    assert (
        apply(client, inference_service(target, "Churn", 2, "s3://models/m-2/artifacts", labels)) == "updated"
    )
    stored = kube_cluster.request(
        "GET", f"/apis/serving.kserve.io/v1beta1/namespaces/{namespace}/inferenceservices/churn"
    )
    assert stored["spec"]["predictor"]["model"]["storageUri"] == "s3://models/m-2/artifacts"
    assert stored["metadata"]["annotations"]["ml.airflow.apache.org/model-version"] == "2"
    assert stored["metadata"]["labels"] == labels
