"""The shipped ml_training_pipeline, unchanged, run with dag.test() on the local backend with
``artifact_root=s3://...`` (moto on loopback, a test double of S3): every shard, checkpoint, model,
evaluation file and MLflow artifact lands in the bucket, nothing under the worker's artifacts
directory, and the registered model loads and predicts. Only connections change."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from dag_runs import load_dag, run
from s3_server import SECRET_KEY

from airflow_ml_provider.hooks.model_registry import CHAMPION, ModelRegistryHook
from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.runtime import storage
from support import REPO

pytestmark = pytest.mark.integration

MODEL = "ml_training_pipeline.on_s3"


@pytest.fixture(scope="module")
def on_s3(s3, airflow_db, tmp_path_factory):
    """Connections only: ml_training's artifact_root on S3 with its aws connection, and a registry
    (SQLite, fresh) whose artifact root is in the same bucket."""
    bucket = s3.new_bucket("pipeline")
    root = f"s3://{bucket}/ml"
    connections = {
        "AIRFLOW_CONN_S3_ARTIFACTS": s3.airflow_connection(),
        "AIRFLOW_CONN_ML_TRAINING_DEFAULT": json.dumps({"conn_type": "ml_training", "extra": {
            "artifact_root": root, "artifact_conn_id": "s3_artifacts"}}),
        "AIRFLOW_CONN_ML_REGISTRY_DEFAULT": json.dumps({
            "conn_type": "ml_registry", "host": f"sqlite:///{tmp_path_factory.mktemp('registry')}/mlflow.db",
            "extra": {"artifact_root": f"{root}/mlartifacts"}}),
    }
    saved = {name: os.environ.get(name) for name in connections}
    os.environ.update(connections)
    result = run(load_dag(REPO / "dags" / "ml_training_pipeline.py"),
                 {"model_name": MODEL, "boost_rounds": 20, "min_accuracy": 0.5},
                 datetime(2026, 2, 1, tzinfo=timezone.utc))
    yield bucket, root, result
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def test_the_pipeline_reads_and_writes_only_the_s3_artifact_root(s3, on_s3):
    bucket, root, result = on_s3
    assert result.state == "success", result.states
    train, evaluation = result.value("train_lightgbm"), result.value("evaluate")
    references = [result.value("prepare_data", key) for key in ("train", "valid", "test", "processed")]
    references += result.value("prepare_data") + [result.value("preprocess")["output_dir"]]
    references += [train["model_path"], evaluation["model_path"]]
    assert all(ref.startswith(f"{root}/") for ref in references), references

    keys = s3.keys(bucket)
    job = train["job_name"]
    assert f"ml/artifacts/{job}/model/model.txt" in keys
    checkpoints = [k for k in keys if k.startswith(f"ml/artifacts/{job}/checkpoints/")]
    assert [k for k in checkpoints if "/tensorboard/" not in k] == [
        f"ml/artifacts/{job}/checkpoints/{file}" for file in
        [f"booster-{n:06d}.txt" for n in (10, 20)] + [f"scores-{r}of2-{n:06d}.npz" for r in (0, 1) for n in (10, 20)]
    ], "rank 0's boosters, each of the 2 workers' scores beside them"
    assert [k for k in checkpoints if k.startswith(f"ml/artifacts/{job}/checkpoints/tensorboard/") and "tfevents" in k], \
        "rank 0's TensorBoard events, in the bucket beside the checkpoints"
    # ONE preprocessing job committed each of the 4 parts once on S3: its file, then its marker (issue 43)
    processed = result.value("prepare_data", "processed").removeprefix(f"s3://{bucket}/")
    committed = sorted(k.removeprefix(f"{processed}/") for k in keys if k.startswith(f"{processed}/"))
    names = ["train-00000.npz", "train-00001.npz", "test.npz", "valid.npz"]
    assert committed == sorted(f"shard-{i:06d}/{file}" for i, name in enumerate(names) for file in (name, "_COMMITTED"))
    assert result.value("preprocess")["shards"]["shards_ran"] == 4
    assert [key for key in result.states if key[0] == "preprocess"] == [("preprocess", -1)]
    evaluation_files = {k.rsplit("/", 1)[1] for k in keys if k.startswith(f"ml/artifacts/{evaluation['job_name']}/evaluation/")}
    assert evaluation_files == {"metrics.json", "evaluation_report.md", "training_curve.png"}
    mlflow_keys = [k for k in keys if k.startswith("ml/mlartifacts/")]
    assert any(k.endswith("/artifacts/evaluation_report.md") for k in mlflow_keys), mlflow_keys
    assert any(k.endswith("/model.txt") for k in mlflow_keys), "the registered model's file is in the bucket"

    local = TrainingBackendHook().get_backend("local")
    assert not Path(local.default_artifact_dir(job)).exists(), "the worker's disk got artifacts"
    records = [(local.job_dir(job) / "job.json").read_text(), (local.job_dir(evaluation["job_name"]) / "job.json").read_text()]
    assert all(SECRET_KEY not in record for record in records), "a credential reached a job record"
    assert all(json.loads(record)["spec"]["env"]["AWS_ENDPOINT_URL_S3"] == s3.url for record in records)


def test_the_registered_model_is_loaded_from_the_bucket_and_predicts(on_s3):
    bucket, root, result = on_s3
    deploy, evaluation = result.value("deploy"), result.value("evaluate")
    assert deploy["promoted"] and deploy["version"] == 1
    store = TrainingBackendHook().artifact_store("local")
    with storage.open_read(store.locate(result.value("prepare_data", "test"))) as f, np.load(f) as test:
        X, y = test["X"], test["y"]
    registry = ModelRegistryHook()
    with registry.mlflow() as mlflow:
        assert mlflow.MlflowClient().get_model_version_download_uri(MODEL, "1").startswith(f"{root}/mlartifacts/")
        champion = mlflow.pyfunc.load_model(f"models:/{MODEL}@{CHAMPION}")
    accuracy = float(np.mean(champion.predict(X).argmax(axis=1) == y))
    assert accuracy == pytest.approx(evaluation["metrics"]["accuracy"], abs=1e-6) and accuracy > 0.8
    assert SECRET_KEY not in os.environ.values()
