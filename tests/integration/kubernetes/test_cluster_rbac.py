"""deploy/kubernetes/rbac.yaml is enough: a user holding exactly its Role's rules (and no other binding)
submits each backend's job, reads its status, follows it through the shared watch, reads its pods'
logs (and may list their metrics), sees its gang's state and deletes it, through the connection a user would
configure."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml
from kube_cluster import TRAINER_TOKEN, new_namespace, resource_path

from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.jobs.backends.base import JobNotFound, ResourcesUnavailable
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState
from airflow_ml_provider.labels import JOB_NAME as JOB_NAME_LABEL
from airflow_ml_provider.logs.source import LogLine
from support import REPO

pytestmark = pytest.mark.integration

RBAC = REPO / "deploy" / "kubernetes" / "rbac.yaml"


def role_rules() -> list[dict]:
    [role] = [doc for doc in yaml.safe_load_all(RBAC.read_text()) if doc["kind"] == "Role"]
    return role["rules"]


@pytest.fixture
def trainer_namespace(kube_cluster, kubelet, monkeypatch) -> str:
    """A namespace whose Kubernetes connection authenticates as "trainer", bound to the shipped Role."""
    namespace = new_namespace(kube_cluster, monkeypatch, kube_cluster.kubeconfig_for(TRAINER_TOKEN))
    kube_cluster.grant(namespace, "trainer", role_rules())
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT", json.dumps({"conn_type": "ml_training", "extra": {
        "namespace": namespace, "image": "registry.example/train:1", "artifact_root": "s3://models/ml"}}))
    return namespace


async def _first_status(backend, name: str):
    async for status in backend.statuses(name, interval=1.0):
        return status


@pytest.mark.parametrize("kind,framework", [("mpijob", "horovod"), ("volcano", "horovod"), ("volcano", "lightgbm"),
                                            ("indexed-job", "lightgbm"), ("trainjob", "pytorch")])
def test_the_shipped_role_covers_every_call_of_a_job_s_life(kind, framework, kube_cluster, kubelet, trainer_namespace,
                                                            request):
    if kind == "trainjob":
        request.getfixturevalue("trainer_cluster")  # Trainer's CRDs in the same cluster
    hook = TrainingBackendHook()
    backend = hook.get_backend(kind)
    name = JobIdentity("rbac", f"train-{framework}", "manual__1").name
    spec = TrainingJobSpec(framework=framework, command=["python", "train.py"], num_workers=2,
                           image=hook.job_setup(backend).image(framework))
    assert backend.submit(name, spec, {}) is True
    assert backend.status(name).state is JobState.PENDING
    assert asyncio.run(asyncio.wait_for(_first_status(backend, name), 60)).state is JobState.PENDING

    pod = f"{name}-worker-0"
    kube_cluster.request("POST", f"/api/v1/namespaces/{trainer_namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "labels": {JOB_NAME_LABEL: name}},
        "spec": {"nodeName": "fake-node", "containers": [{"name": "worker", "image": "img:1"}]}})
    kubelet.append(trainer_namespace, pod, "worker", "epoch 1", "2026-11-21T10:00:00Z")
    assert backend.log_source(name).read().lines == [LogLine(pod, "epoch 1")]
    # the pods' metrics: this cluster serves no metrics.k8s.io, and a 404, not a 403, says the Role may list them
    with pytest.raises(ResourcesUnavailable, match="serves no metrics.k8s.io"):
        backend.resource_use(name)

    if kind == "volcano":  # the PodGroup Volcano's controller would make, unschedulable
        job = backend.get(backend.kind, name)
        api_version, group = backend.pod_group(job)
        kube_cluster.request("POST", resource_path(api_version, "PodGroup", trainer_namespace), {
            "apiVersion": api_version, "kind": "PodGroup", "metadata": {"name": group}, "spec": {"minMember": 2},
            "status": {"conditions": [{"type": "Unschedulable", "status": "True", "lastTransitionTime":
                                       "2026-11-21T10:00:00Z", "message": "2/2 tasks in gang unschedulable"}]}})
        status = backend.status(name)
        assert (status.state, status.message) == (JobState.GANG_PENDING, "2/2 tasks in gang unschedulable")

    backend.delete(name)
    with pytest.raises(JobNotFound):
        backend.status(name)
