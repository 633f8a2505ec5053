"""What the Kubernetes backends render for an XGBoost job: the tracker beside worker 0, reached through the job's
headless Service name, every worker's DMLC_* variables and the gate before the user's unchanged argv; the
backends that cannot run it refuse it, naming those that can."""

from __future__ import annotations

import copy

import pytest
from test_controller_behaviour import job_runs
from trainer_controller import (
    AIRFLOW_ML_XGBOOST,
    COMPLETION_INDEX_FIELD,
    XGBOOST_DISTRIBUTED_FILE,
    jobset_for,
    xgboost_distributed,
)

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


def test_mpijob_refuses_xgboost_naming_the_backends_that_run_it():
    assert backends_for("xgboost") == ["local", "volcano", "indexed-job", "trainjob"]
    with pytest.raises(JobSubmissionError,
                       match=r"not 'xgboost'; backends that run it: local, volcano, indexed-job, trainjob$"):
        get_backend("mpijob", api_client=None, namespace="ml").render("job", TrainingJobSpec(**XGB), {})


def test_a_trainjob_names_the_xgboost_runtime_and_serves_the_tracker_where_trainer_says_it_is():
    """Trainer's xgboost plugin sets every DMLC_* variable (the tracker at node 0's pod, port 29500) and starts no
    tracker (xgboost.go:115-144): the TrainJob names the provider's airflow-ml-xgboost, sets none of them (its
    webhook would refuse it), and its command is the gate, rank from Trainer's DMLC_TASK_ID, node 0 serving."""
    [trainjob] = manifests("trainjob")
    assert trainjob["spec"]["runtimeRef"]["name"] == "airflow-ml-xgboost"
    trainer = trainjob["spec"]["trainer"]
    assert trainer["command"] == [*GATE, "--serve-workers", "3", "--", "python", "train.py", "--rounds", "5"]
    assert trainer["numNodes"] == 3 and "numProcPerNode" not in trainer
    assert not [var for var in trainer["env"] if var["name"].startswith("DMLC_")]
    trainjob["metadata"]["uid"] = "0"
    [node] = jobset_for(trainjob)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    env = {var["name"]: var.get("value", var.get("valueFrom")) for var in node["env"]}
    assert (env["DMLC_TRACKER_URI"], env["DMLC_TRACKER_PORT"], env["DMLC_NUM_WORKER"]) == ("job-node-0-0.job", "29500",
                                                                                         "3")
    assert env["DMLC_TASK_ID"] == {"fieldRef": {"fieldPath": COMPLETION_INDEX_FIELD}}
    assert {"containerPort": 29500} in node["ports"]


def test_the_xgboost_runtime_is_trainers_stock_one_with_a_crash_ending_the_job():
    """deploy/kubernetes/trainingruntime-xgboost.yaml is the pinned xgboost-distributed but for its name and the
    two fields a TrainJob cannot set; on the stock runtime a crashing worker's pod ran 7 times (OnFailure, 6)."""
    if not XGBOOST_DISTRIBUTED_FILE.is_file():
        pytest.skip("no verified xgboost_distributed.yaml: run `make crds`")
    [trainjob] = manifests("trainjob")
    trainjob["metadata"]["uid"] = "0"
    stock = xgboost_distributed()
    assert job_runs(jobset_for(trainjob)["spec"]["replicatedJobs"][0]["template"]["spec"]) == 1
    assert job_runs(jobset_for(trainjob, stock)["spec"]["replicatedJobs"][0]["template"]["spec"]) == 7
    ours = copy.deepcopy(AIRFLOW_ML_XGBOOST)
    ours["metadata"]["name"] = "xgboost-distributed"
    [job] = ours["spec"]["template"]["spec"]["replicatedJobs"]
    assert job["template"]["spec"].pop("backoffLimit") == 0
    assert job["template"]["spec"]["template"]["spec"].pop("restartPolicy") == "Never"
    assert ours == stock


@pytest.mark.parametrize("fields,refused", [
    ({"env": {"DMLC_TASK_ID": "0"}}, "env.DMLC_TASK_ID: Trainer's xgboost plugin sets it"),
    ({"resources": {"gpu": 2}}, "resources.gpu: Trainer's xgboost plugin counts a worker per GPU"),
])
def test_a_trainjob_refuses_what_trainers_xgboost_plugin_would_contradict(fields, refused):
    with pytest.raises(ValueError, match=f"^{refused}"):
        manifests("trainjob", **fields)


def test_a_one_gpu_xgboost_trainjob_counts_one_worker_a_node():
    [trainjob] = manifests("trainjob", resources={"gpu": 1})
    trainjob["metadata"]["uid"] = "0"
    [node] = jobset_for(trainjob)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    assert {"name": "DMLC_NUM_WORKER", "value": "3"} in node["env"]


@pytest.mark.parametrize("kind", ["indexed-job", "volcano"])
def test_the_worker_port_is_refused_for_xgboost(kind):
    with pytest.raises(ValueError, match=r"kubernetes.worker_port: the .* \(xgboost\) backend does not use it"):
        manifests(kind, kubernetes={"worker_port": 13000})


def test_elastic_bounds_are_refused_for_xgboost_on_every_backend():
    with pytest.raises(SpecError, match=r"min_workers/max_workers: an XGBoost job's tracker waits for a fixed number"):
        TrainingJobSpec(**XGB, min_workers=2, max_workers=4)
