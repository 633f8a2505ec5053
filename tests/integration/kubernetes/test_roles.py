"""A parameter-server job (roles chief, ps, worker) on the volcano backend against a real kube-apiserver with the
real Volcano Job CRD: its task per role is accepted and stored with every field it was given."""

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
