"""What the Kubernetes backends render for an XGBoost job: the tracker beside worker 0, reached through the job's
headless Service name, every worker's DMLC_* variables and the gate before the user's unchanged argv; the
backends that cannot run it refuse it, naming those that can."""

from __future__ import annotations

import pytest

from airflow_ml_provider.jobs.backends import backends_for, get_backend
from airflow_ml_provider.jobs.backends.base import JobSubmissionError
from airflow_ml_provider.jobs.spec import SpecError, TrainingJobSpec

XGB = {"framework": "xgboost", "command": ["python", "train.py", "--rounds", "5"], "num_workers": 3, "image": "img:1"}
GATE = ["python", "-m", "airflow_ml_provider.runtime.xgboost_tracker", "worker"]


def manifests(kind: str, **spec) -> list[dict]:
    return get_backend(kind, api_client=None, namespace="ml").manifests("job", TrainingJobSpec(**{**XGB, **spec}), {})


def _container(template: dict) -> dict:
    [container] = template["spec"]["containers"]
    return container


def _env(container: dict) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container["env"] if "value" in item}


def test_an_indexed_job_serves_the_tracker_beside_pod_0_at_its_stable_name():
    job, service = manifests("indexed-job")
    container = _container(job["spec"]["template"])
    assert container["command"] == [*GATE, "--task-id", "$(JOB_COMPLETION_INDEX)", "--serve-workers", "3",
                                    "--", "python", "train.py", "--rounds", "5"]
    env = _env(container)
    assert (env["DMLC_TRACKER_URI"], env["DMLC_TRACKER_PORT"], env["DMLC_NUM_WORKER"]) == ("job-0.job", "9091", "3")
    assert "DMLC_TASK_ID" not in env  # the gate sets it from the completion index the kubelet expands
    assert container["ports"] == [{"containerPort": 9091}]
    assert job["spec"]["template"]["spec"]["subdomain"] == "job"
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["ports"] == [{"name": "workers", "port": 9091}]
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 3


def test_a_volcano_job_serves_the_tracker_beside_worker_0_at_the_svc_plugins_name():
    [job] = manifests("volcano")
    [task] = job["spec"]["tasks"]
    container = _container(task["template"])
    assert container["command"] == [*GATE, "--task-id", "$(VC_TASK_INDEX)", "--serve-workers", "3",
                                    "--", "python", "train.py", "--rounds", "5"]
    env = _env(container)
    assert (env["DMLC_TRACKER_URI"], env["DMLC_TRACKER_PORT"]) == ("job-worker-0.job", "9091")
    assert env["DMLC_NUM_WORKER"] == "3" and task["replicas"] == 3
    assert job["spec"]["plugins"] == {"svc": [], "env": []}  # the svc plugin's names, the env plugin's VC_TASK_INDEX
    assert job["spec"]["minAvailable"] == 3  # the gang: a tracker without all its workers waits forever


@pytest.mark.parametrize("kind", ["mpijob", "trainjob"])
def test_backends_without_a_tracker_refuse_xgboost_naming_those_that_run_it(kind):
    assert backends_for("xgboost") == ["local", "volcano", "indexed-job"]
    with pytest.raises(JobSubmissionError, match=r"not 'xgboost'; backends that run it: local, volcano, indexed-job"):
        get_backend(kind, api_client=None, namespace="ml").render("job", TrainingJobSpec(**XGB), {})


@pytest.mark.parametrize("kind", ["indexed-job", "volcano"])
def test_the_worker_port_is_refused_for_xgboost(kind):
    with pytest.raises(ValueError, match=r"kubernetes.worker_port: the .* \(xgboost\) backend does not use it"):
        manifests(kind, kubernetes={"worker_port": 13000})


def test_elastic_bounds_are_refused_for_xgboost_on_every_backend():
    with pytest.raises(SpecError, match=r"min_workers/max_workers: an XGBoost job's tracker waits for a fixed number"):
        TrainingJobSpec(**XGB, min_workers=2, max_workers=4)
