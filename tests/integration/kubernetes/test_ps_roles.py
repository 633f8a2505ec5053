"""A parameter-server job (roles chief, ps, worker) against a real kube-apiserver: on volcano (the real Volcano Job
CRD) a task per role, on indexed-job an Indexed Job per role owned by the chief's and one headless Service, each
accepted and stored with every field it was given."""

from __future__ import annotations

import json

import pytest

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import TrainingJobSpec

pytestmark = pytest.mark.integration

IDENTITY = JobIdentity("ps_pipeline", "train", "manual__2026-12-02T00:00:00+00:00")


def test_a_ps_job_is_accepted_as_a_volcano_task_per_role(kube_cluster, namespace):
    spec = TrainingJobSpec(
        framework="tensorflow-ps", image="registry.example/train:1", timeout_s=1800,
        command=["python", "-m", "airflow_ml_provider.runtime.tf_ps_trainer", "--steps", "100"],
        scheduling={"queue": "research", "priority_class": "normal"},
        roles={"chief": {"resources": {"cpu": 2, "memory": "4Gi"}},
               "ps": {"count": 2, "priority_class": "high", "resources": {"memory": "16Gi"}},
               "worker": {"count": 3, "min_count": 2, "resources": {"cpu": 4, "gpu": 1}}})
    jobs = get_backend("volcano", api_client=kube_cluster.api_client(), namespace=namespace)
    name = IDENTITY.name
    assert jobs.submit(name, spec, IDENTITY.labels()) is True
    body = jobs.get(jobs.kind, name)["spec"]
    assert body["queue"] == "research" and body["minAvailable"] == 5 and body["priorityClassName"] == "normal"
    tasks = {task["name"]: task for task in body["tasks"]}
    assert [(n, t["replicas"], t.get("minAvailable")) for n, t in tasks.items()] == [
        ("chief", 1, None), ("ps", 2, None), ("worker", 3, 2)]
    assert tasks["chief"]["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"},
                                          {"event": "PodFailed", "action": "AbortJob"}]
    assert tasks["ps"]["policies"] == [{"event": "PodFailed", "action": "AbortJob"}] and "policies" not in tasks["worker"]
    pods = {n: t["template"]["spec"] for n, t in tasks.items()}
    assert pods["ps"]["priorityClassName"] == "high" and pods["worker"]["restartPolicy"] == "OnFailure"
    assert pods["worker"]["containers"][0]["resources"]["limits"] == {"cpu": "4.0", "nvidia.com/gpu": "1"}
    assert pods["ps"]["containers"][0]["resources"]["limits"] == {"memory": "16Gi"}
    assert {t["template"]["spec"]["activeDeadlineSeconds"] for t in tasks.values()} == {1800}
    chief = pods["chief"]["containers"][0]
    assert chief["command"][3:6] == ["--task-index", "$(VC_TASK_INDEX)", "--"]
    config = json.loads(next(e["value"] for e in chief["env"] if e["name"] == "TF_CONFIG"))
    assert config["cluster"]["ps"] == [f"{name}-ps-0.{name}:2222", f"{name}-ps-1.{name}:2222"]
    assert config["task"] == {"type": "chief", "index": 0}


def test_a_ps_job_is_accepted_as_an_indexed_job_per_role_owned_by_the_chiefs(kube_cluster, namespace):
    spec = TrainingJobSpec(
        framework="tensorflow-ps", image="registry.example/train:1", timeout_s=1800, scheduling={"gang": False},
        command=["python", "-m", "airflow_ml_provider.runtime.tf_ps_trainer", "--steps", "100"],
        roles={"chief": {}, "ps": {"count": 2, "resources": {"memory": "16Gi"}}, "worker": {"count": 3}})
    jobs = get_backend("indexed-job", api_client=kube_cluster.api_client(), namespace=namespace)
    name = IDENTITY.name
    assert jobs.submit(name, spec, IDENTITY.labels()) is True
    chief = jobs.get("Job", name, "batch/v1")
    ps, workers = (jobs.get("Job", f"{name}-{role}", "batch/v1") for role in ("ps", "worker"))
    # (this kube-apiserver, v1.20.2, predates completionMode and drops it, as for every indexed-job job)
    assert [(j["spec"]["completions"], j["spec"]["parallelism"]) for j in (chief, ps, workers)] == [(1, 1), (2, 2), (3, 3)]
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": chief["metadata"]["uid"]}
    assert ps["metadata"]["ownerReferences"] == [owner] == workers["metadata"]["ownerReferences"]
    assert "ownerReferences" not in chief["metadata"]
    assert ps["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"memory": "16Gi"}
    assert workers["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    service = jobs.get("Service", name, "v1")
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["ports"][0]["port"] == 2222
    assert jobs.status(name).state.value in ("PENDING", "RUNNING")  # the chief's Job is the job's status
