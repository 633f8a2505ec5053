"""A hyperparameter search with the training connection's ``artifact_root=s3://...`` (moto on loopback,
a test double of S3): every trial's LightGBM job keeps its model and checkpoints under
``<artifact_root>/artifacts/<trial job>/``, reached with the connection's credentials, which no job
record holds; nothing lands in the local backend's own artifacts directory. Run on a worker (an
operator trial) and in the triggerer (a TrainingJobSpec dict trial)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from s3_server import SECRET_KEY

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("dag_id", ["ml_test_search_artifacts", "ml_test_search_artifacts_deferred"])
def test_every_trial_keeps_its_model_and_checkpoints_under_the_s3_artifact_root(s3, run_dag, monkeypatch, dag_id):
    bucket = s3.new_bucket("search")
    root = f"s3://{bucket}/ml"
    monkeypatch.setenv("AIRFLOW_CONN_S3_ARTIFACTS", s3.airflow_connection())
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT", json.dumps(
        {"conn_type": "ml_training", "extra": {"artifact_root": root, "artifact_conn_id": "s3_artifacts"}}))

    result = run_dag(dag_id)

    assert result.state == "success", result.task_states
    out = result.xcom["search"]
    assert [t["state"] for t in out["trials"]] == ["COMPLETE", "COMPLETE"], out["trials"]
    keys = s3.keys(bucket)
    local = LocalBackend(Path(os.environ["AIRFLOW_HOME"]) / "ml")
    for trial in out["trials"]:
        job = trial["job_name"]
        assert f"ml/artifacts/{job}/model/model.txt" in keys, keys
        assert [k for k in keys if k.startswith(f"ml/artifacts/{job}/checkpoints/") and "/tensorboard/" not in k] == [
            f"ml/artifacts/{job}/checkpoints/booster-000010.txt", f"ml/artifacts/{job}/checkpoints/scores-0of1-000010.npz"]
        assert not Path(local.default_artifact_dir(job)).exists(), "a trial wrote to the worker's disk"
        assert SECRET_KEY not in (local.job_dir(job) / "job.json").read_text(), "a credential reached a job record"
    assert out["best_model_path"] == f"{root}/artifacts/{out['best_job_name']}/model/model.txt"
