"""The artifact root on the Airflow side: resolved from the ml_training connection or the
``[ml_training]`` setting, read and written through ObjectStoragePath with an ``aws`` connection
(pointing at moto, a test double of S3), what workers are handed per backend, and MLflow's
artifacts on S3 without credentials in the environment."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowFailException
from s3_server import ACCESS_KEY, SECRET_KEY

from airflow_ml_provider.hooks.model_registry import ModelRegistryHook
from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.local.backend import LocalBackend

pytestmark = pytest.mark.integration

SECRET_REFS = {"AWS_ACCESS_KEY_ID": {"secret": "s3-credentials", "key": "access-key"}}


@pytest.fixture
def s3_root(s3, bucket, monkeypatch) -> str:
    """Connections as a user would configure them: ml_training with an s3:// root, and its aws connection."""
    root = f"s3://{bucket}/ml"
    monkeypatch.setenv("AIRFLOW_CONN_S3_ARTIFACTS", s3.airflow_connection())
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT", json.dumps({"conn_type": "ml_training", "extra": {
        "artifact_root": root + "/", "artifact_conn_id": "s3_artifacts", "artifact_secret_env": SECRET_REFS,
        "image": "registry.example/train:1", "image_horovod": "registry.example/train-gpu:1"}}))
    return root


def _cluster(kind: str):
    """A cluster backend with no cluster behind it: what a job's setup reads of the connection needs none."""
    return get_backend(kind, api_client=None, namespace="ml")


def test_without_configuration_artifacts_stay_where_the_local_backend_always_kept_them():
    hook = TrainingBackendHook()
    backend = hook.get_backend("local")
    assert isinstance(backend, LocalBackend)
    root = str(Path(os.environ["AIRFLOW_HOME"]) / "ml")
    assert hook.artifact_store("local").root == root
    assert hook.job_setup(backend).artifact_dir("aml-train-1") == backend.default_artifact_dir("aml-train-1") == (
        f"{root}/artifacts/aml-train-1")
    assert hook.artifact_store("mpijob") is None
    environment = hook.job_setup("local").checked()
    assert (environment.env, environment.secret_env, environment.secrets) == ({}, {}, {})
    assert ModelRegistryHook().settings().artifact_root == Path(root, "mlartifacts").as_uri()


def test_the_setting_applies_when_the_connection_names_no_root(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__ARTIFACT_ROOT", str(tmp_path / "pvc"))
    hook = TrainingBackendHook()
    backend = hook.get_backend("local")
    assert hook.job_setup(backend).artifact_dir("aml-x-1") == f"{tmp_path}/pvc/artifacts/aml-x-1"
    assert hook.artifact_store("indexed-job").root == f"{tmp_path}/pvc"
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__ARTIFACT_ROOT", "relative/dir")
    with pytest.raises(AirflowFailException, match="artifact_root: 'relative/dir' must be an absolute path"):
        hook.artifact_store("local")
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__ARTIFACT_ROOT", "ftp://host/x")
    with pytest.raises(AirflowFailException, match="artifact_root: 'ftp://host/x' is not a supported location"):
        hook.artifact_store("local")


def test_an_s3_root_is_read_and_written_with_the_aws_connection(s3, bucket, s3_root):
    hook = TrainingBackendHook()
    store = hook.artifact_store("local")
    assert (store.root, store.conn_id) == (s3_root, "s3_artifacts")
    assert hook.job_setup("local").artifact_dir("aml-train-1") == f"{s3_root}/artifacts/aml-train-1"
    assert hook.artifact_store("mpijob").root == s3_root
    path = store.path("artifacts", "aml-train-1", "model", "note.txt")
    path.write_text("written through ObjectStoragePath")
    assert s3.keys(bucket) == ["ml/artifacts/aml-train-1/model/note.txt"]
    assert store.locate(f"{s3_root}/artifacts/aml-train-1/model/note.txt").read_text() == "written through ObjectStoragePath"
    assert SECRET_KEY not in os.environ.values(), "credentials leaked into the environment"


def test_local_jobs_get_the_connection_credentials_as_secrets_and_cluster_jobs_only_references(s3, s3_root):
    hook = TrainingBackendHook()
    local = hook.job_setup("local").checked()
    assert local.env == {"AWS_ENDPOINT_URL_S3": s3.url, "AWS_DEFAULT_REGION": "us-east-1"}
    assert local.secrets == {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    assert local.submit_kwargs() == {"secrets": local.secrets} and local.secret_env == {}
    cluster = hook.job_setup(_cluster("volcano")).checked()
    assert cluster.env == local.env and cluster.secrets == {} and cluster.submit_kwargs() == {}
    own = {"secret_env": {"WANDB_API_KEY": {"secret": "wandb", "key": "key"}}, "service_account": "trainer"}
    assert cluster.merged_kubernetes(own) == {"service_account": "trainer",
                                              "secret_env": {**SECRET_REFS, **own["secret_env"]}}
    assert cluster.merged_env({"AWS_DEFAULT_REGION": "eu-west-1"})["AWS_DEFAULT_REGION"] == "eu-west-1"
    assert (hook.job_setup(_cluster("mpijob")).image("horovod"), hook.job_setup(_cluster("indexed-job")).image("lightgbm"),
            hook.job_setup("local").image("lightgbm")) == ("registry.example/train-gpu:1", "registry.example/train:1", None)


def test_the_embedded_registry_keeps_mlflow_artifacts_under_the_s3_root(s3, bucket, s3_root, tmp_path):
    registry = ModelRegistryHook()
    assert registry.settings().artifact_root == f"{s3_root}/mlartifacts"
    experiment = registry.experiment_id(f"storage-test-{bucket}")
    (tmp_path / "report.md").write_text("# report\n")
    run_id = registry.log_run(experiment, "run", {}, {}, {"accuracy": 0.9}, [], [tmp_path / "report.md"])
    assert f"ml/mlartifacts/storage-test-{bucket}/{run_id}/artifacts/report.md" in s3.keys(bucket)
    with registry.mlflow() as mlflow:
        assert [a.path for a in mlflow.MlflowClient().list_artifacts(run_id)] == ["report.md"]
        assert SECRET_KEY not in os.environ.values() and "MLFLOW_S3_ENDPOINT_URL" not in os.environ
