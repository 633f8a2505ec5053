"""The shipped ml_training_pipeline, unchanged, pointed at a cluster by its connections only: every
job task renders a manifest whose image comes from the connection (per framework), whose data,
model and checkpoint locations are under the s3:// artifact root, and whose S3 credentials are
Secret references; the real kube-apiserver (MPIJob and Volcano CRDs) accepts each of them.

Rendering is what a task does before it submits (``render_template_fields``: the UI's rendered
view shows the same manifest). The upstream results a run would have recorded are handed to it by
``RecordedRun`` below, in place of a task instance's XCom store: pods never run on this API server."""

from __future__ import annotations

import copy
import json
import os

import pytest
import yaml
from dag_runs import load_dag

from airflow_ml_provider.jobs.backends.kubernetes import schemas
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.operators.params import placement
from support import REPO

pytestmark = pytest.mark.integration

ROOT = "s3://models-prod/ml"
IMAGES = {"horovod": "registry.example/train-gpu:2.21", "lightgbm": "registry.example/train-cpu:4.7",
          "generic": "registry.example/train-cpu:4.7"}
SECRET_REFS = {"AWS_ACCESS_KEY_ID": {"secret": "s3-credentials", "key": "access-key"},
               "AWS_SECRET_ACCESS_KEY": {"secret": "s3-credentials", "key": "secret-key"}}
RUN_ID = "manual__2026-03-01T00:00:00+00:00"
DATA = f"{ROOT}/data/ml_training_pipeline/0123456789ab"
PARTS = [f"{DATA}/raw/{name}.npz" for name in ("train-00000", "train-00001", "test", "valid")]
PREPARED = {"prepare_data": PARTS, "processed": f"{DATA}/processed", "train": f"{DATA}/processed/shard-*/train-*.npz",
            "valid": f"{DATA}/processed/shard-000003/valid.npz", "test": f"{DATA}/processed/shard-000002/test.npz",
            "data_version": "159b2cea22c9590c", "objective": "binary", "num_class": 1,
            "kubernetes": {}}  # kubernetes: the default Params' placement


class RecordedRun:
    """What a task instance's ``xcom_pull`` returns for this DAG run's finished upstream tasks."""

    def __init__(self, task_id: str, map_index: int, framework: str, **recorded):
        self.dag_id, self.task_id, self.run_id, self.map_index, self.try_number = (
            "ml_training_pipeline", task_id, RUN_ID, map_index, 1)
        job = JobIdentity(self.dag_id, f"train_{framework}", RUN_ID).name
        model = "model.keras" if framework == "horovod" else "model.txt"
        self.values = {**PREPARED, **recorded, f"train_{framework}": {
            "job_name": job, "backend": "x", "state": "SUCCEEDED", "metrics": {},
            "model_path": f"{ROOT}/artifacts/{job}/model/{model}"}}

    def xcom_pull(self, task_ids, key="return_value", default=None, map_indexes=None, **_):
        return self.values.get(key if key != "return_value" else task_ids, default)


@pytest.fixture
def pipeline(airflow_db):
    """A fresh parse per test: rendering replaces a task's templates with their values."""
    return load_dag(REPO / "dags" / "ml_training_pipeline.py")


@pytest.fixture
def cluster_connection(namespace, monkeypatch) -> str:
    """The only change from the local quick start: the ml_training connection (and an aws connection
    whose non-secret settings reach the pods; its credentials never do)."""
    monkeypatch.setenv("AIRFLOW_CONN_S3_PROD", json.dumps({
        "conn_type": "aws", "login": "AKIAEXAMPLE", "password": "never-in-a-manifest",
        "extra": {"endpoint_url": "https://s3.example.internal", "region_name": "eu-west-1"}}))
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT", json.dumps({"conn_type": "ml_training", "extra": {
        "namespace": namespace, "artifact_root": ROOT, "artifact_conn_id": "s3_prod",
        "artifact_secret_env": SECRET_REFS, "image": IMAGES["generic"], "image_horovod": IMAGES["horovod"],
        "image_lightgbm": IMAGES["lightgbm"]}}))
    return namespace


def _render(pipeline, task_id: str, backend: str, framework: str, **chosen):
    task = pipeline.get_task(task_id)
    params = copy.deepcopy(pipeline.params)
    params.update({"backend": backend, "framework": framework, **chosen})  # what the trigger form would send
    params = params.validate()
    recorded = {"kubernetes": placement(params, pipeline.params)[0]}  # what prepare_data pushes, checked
    ti = RecordedRun(task_id, -1, framework, **recorded)
    task.render_template_fields({"ti": ti, "params": params, "run_id": RUN_ID, "dag": pipeline, "task": task})
    return task, ti


def _containers(obj: dict) -> list[dict]:
    spec = obj["spec"]
    if obj["kind"] == "MPIJob":
        templates = [r["template"] for r in spec["mpiReplicaSpecs"].values()]
    elif obj["kind"] == "Job" and "tasks" in spec:
        templates = [t["template"] for t in spec["tasks"]]
    else:
        templates = [spec["template"]]
    return [c for template in templates for c in template["spec"]["containers"]]


CASES = [("mpijob", "horovod", "train_horovod"), ("mpijob", "horovod", "evaluate"),
         ("volcano", "horovod", "train_horovod"), ("volcano", "lightgbm", "train_lightgbm"),
         ("indexed-job", "lightgbm", "train_lightgbm"), ("indexed-job", "lightgbm", "evaluate")]


@pytest.mark.parametrize("backend,framework,task_id", CASES)
def test_the_same_dag_renders_manifests_the_api_server_accepts(pipeline, cluster_connection, kube_cluster,
                                                               backend, framework, task_id):
    task, ti = _render(pipeline, task_id, backend, framework)
    objects = list(yaml.safe_load_all(task.manifest))
    expected_image = IMAGES["generic" if task_id == "evaluate" else framework]
    containers = _containers(objects[0])
    assert containers and {c["image"] for c in containers} == {expected_image}
    text = task.manifest
    assert "never-in-a-manifest" not in text and "AKIAEXAMPLE" not in text, "a credential value was rendered"
    for container in containers:
        env = {e["name"]: e for e in container.get("env", [])}
        assert env["AWS_ENDPOINT_URL_S3"]["value"] == "https://s3.example.internal"
        assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {"name": "s3-credentials", "key": "access-key"}
        assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "s3-credentials"
    job = JobIdentity.from_context({"ti": ti}).name
    assert f"{ROOT}/artifacts/{job}/checkpoints" in text and f"{ROOT}/artifacts/{job}/model" in text
    assert DATA in text, "the job reads its data from the artifact root"
    assert schemas.validate_all(objects) == []  # Kubernetes 1.29's and 1.37's schemas, the pinned CRDs, offline

    jobs = task.runner.backend
    assert jobs.name == backend and jobs.namespace == cluster_connection
    spec = task.runner.spec  # the try's spec, built once when the task was rendered
    assert jobs.submit(job, spec, JobIdentity.from_context({"ti": ti}).labels()) is True  # the real schemas
    primary = objects[0]
    group, _, version = primary["apiVersion"].rpartition("/")
    plural = {"MPIJob": "mpijobs", "Job": "jobs"}[primary["kind"]]
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    created = kube_cluster.request("GET", f"{prefix}/namespaces/{cluster_connection}/{plural}/{job}")
    assert {c["image"] for c in _containers(created)} == {expected_image}


@pytest.mark.parametrize("backend", ["mpijob", "volcano", "indexed-job"])
def test_preprocessing_is_one_sharded_indexed_job_on_any_cluster_backend(pipeline, cluster_connection, kube_cluster,
                                                                         monkeypatch, backend):
    """Every part of the data (2 train parts, test, valid) is one shard of ONE job (issue 43): on a cluster that job
    is an Indexed Job (``sharding_backend``: mpijob and volcano run no sharded job), a completion per part, its
    inputs in the plan's ConfigMap, committing under the run's processed/ on the artifact root."""
    from airflow_ml_provider.jobs.backends.base import JobSubmissionError
    from airflow_ml_provider.jobs.backends.kubernetes import sharded

    # the test server (tests/kube_cluster.py: v1.20.2) predates Indexed Jobs: refused before any job, naming it
    with pytest.raises(JobSubmissionError, match="has no Indexed Jobs"):
        _render(pipeline, "preprocess", backend, "lightgbm")
    # a connection that says how the cluster retries shards (as on 1.22-1.28: the pods do), whatever /version says
    connection = json.loads(os.environ["AIRFLOW_CONN_ML_TRAINING_DEFAULT"])
    connection["extra"]["per_index_retries"] = "off"
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT", json.dumps(connection))
    task, ti = _render(load_dag(REPO / "dags" / "ml_training_pipeline.py"), "preprocess", backend, "lightgbm")
    assert task.runner.backend.name == "indexed-job"
    job_object, plan = yaml.safe_load_all(task.manifest)
    assert (job_object["kind"], plan["kind"]) == ("Job", "ConfigMap")
    assert (job_object["spec"]["completions"], job_object["spec"]["parallelism"]) == (4, 2)  # parts, workers
    (worker,) = _containers(job_object)
    assert worker["image"] == IMAGES["generic"]
    assert worker["command"][worker["command"].index("--") + 1:] == [
        "python", "-m", "airflow_ml_provider.runtime.preprocess", "--shards"]
    env = {e["name"]: e for e in worker["env"]}
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {"name": "s3-credentials", "key": "access-key"}
    assert [json.loads(line) for line in plan["data"][sharded.PLAN_KEY].splitlines()] == [[part] for part in PARTS]
    spec = task.runner.spec
    assert (spec.shards.output, spec.shards.in_process) == (f"{DATA}/processed", True)
    assert "never-in-a-manifest" not in task.manifest and "AKIAEXAMPLE" not in task.manifest
    job = JobIdentity.from_context({"ti": ti})
    assert task.runner.backend.submit(job.name, spec, job.labels()) is True
    created = kube_cluster.request("GET", f"/apis/batch/v1/namespaces/{cluster_connection}/jobs/{job.name}")
    assert created["spec"]["completions"] == 4 and _containers(created)[0]["image"] == IMAGES["generic"]


def test_without_an_artifact_root_a_cluster_run_is_refused_before_any_job(pipeline, namespace, monkeypatch):
    from airflow_ml_provider.hooks.artifact_store import ArtifactStoreError
    from airflow_ml_provider.hooks.training_backend import TrainingBackendHook

    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT", json.dumps({"conn_type": "ml_training",
                                                                       "extra": {"image": IMAGES["generic"]}}))
    with pytest.raises(ArtifactStoreError, match="backend 'mpijob' has no artifact_root"):
        TrainingBackendHook().run_data_dir("ml_training_pipeline", RUN_ID, "mpijob")


SPOT = {"node_selector": {"cloud.google.com/gke-spot": "true", "pool": "gpu-spot"},
        "tolerations": [{"key": "cloud.google.com/gke-spot", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                         "toleration_seconds": 60}]}
RENDERED_TOLERATIONS = [{"key": "cloud.google.com/gke-spot", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": 60}]


def _pod_specs(obj) -> list[dict]:
    """Every pod spec in a manifest (one holding containers), a TrainJob's runtime patch's included."""
    if isinstance(obj, list):
        return [spec for item in obj for spec in _pod_specs(item)]
    if not isinstance(obj, dict):
        return []
    own = [obj] if "nodeSelector" in obj or isinstance(obj.get("containers"), list) else []
    return own + [spec for value in obj.values() for spec in _pod_specs(value)]


@pytest.mark.parametrize("backend,framework", [("mpijob", "horovod"), ("volcano", "lightgbm"),
                                               ("indexed-job", "lightgbm"), ("trainjob", "pytorch")])
def test_the_spot_params_place_every_pod_of_the_training_job(pipeline, cluster_connection, kube_cluster, request,
                                                             backend, framework):
    """The node_selector and tolerations Params, checked by the first task and handed on as its XCom, land in
    every pod template of the training job; the real API server accepts the job."""
    if backend == "trainjob":
        request.getfixturevalue("trainer_cluster")
    task, ti = _render(pipeline, f"train_{framework}", backend, framework, **SPOT)
    objects = list(yaml.safe_load_all(task.manifest))
    assert schemas.validate_all(objects) == []  # every release of the range keeps the placement fields, offline too
    specs = [spec for obj in objects for spec in _pod_specs(obj)]
    assert specs
    for spec in specs:
        assert spec["nodeSelector"] == SPOT["node_selector"]
        assert spec["tolerations"] == RENDERED_TOLERATIONS
    job = JobIdentity.from_context({"ti": ti})
    assert task.runner.backend.submit(job.name, task.runner.spec, job.labels()) is True

