"""A wrong S3 artifact root (its bucket missing, its credentials refused, its endpoint down) fails early,
and the message names the root and the connection (issue 19). S3 is moto on loopback, a test double
(tests/s3_server.py); credentials are checked by moto's own IAM enforcement."""

from __future__ import annotations

import json
import socket

import pytest
from airflow.sdk.exceptions import AirflowFailException
from dag_runs import load_dag, run
from s3_server import REGION

from airflow_ml_provider.hooks.artifact_store import ArtifactStoreError
from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from support import TEST_DAGS

pytestmark = pytest.mark.integration

CONN = "s3_wrong"  # plus the case: Airflow caches a filesystem per connection id


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(params=["missing_bucket", "refused_credentials", "endpoint_down"])
def wrong_root(request, s3, monkeypatch, tmp_path) -> tuple[str, str]:
    """The ml_training connection's s3:// root and its aws connection, wrong in one way each."""
    bucket, aws = s3.new_bucket("wrong"), json.loads(s3.airflow_connection())
    if request.param == "missing_bucket":
        bucket = f"{bucket}-missing"
    elif request.param == "refused_credentials":
        import moto.settings

        monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # moto checks keys from now on
        aws["login"], aws["password"] = "AKIAUNKNOWNKEY000000", "not-the-secret"
    else:
        aws["extra"] = {"endpoint_url": f"http://127.0.0.1:{_closed_port()}", "region_name": REGION}
    root, conn = f"s3://{bucket}/ml", f"{CONN}_{request.param}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn.upper()}", json.dumps(aws))
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT", json.dumps({"conn_type": "ml_training", "extra": {
        "artifact_root": root, "artifact_conn_id": conn, "local_root": str(tmp_path / "ml")}}))
    return root, conn


def _names_root_and_connection(message: str, root: str, conn: str = CONN) -> None:
    assert f"artifact_root {root!r} (through connection {conn!r}) cannot be used" in message, message


def test_a_wrong_s3_root_fails_naming_the_root_and_the_connection(wrong_root):
    with pytest.raises(ArtifactStoreError) as prepared:  # where a pipeline first writes: its data
        TrainingBackendHook().run_data_dir("some_dag", "run-1", "local")
    _names_root_and_connection(str(prepared.value), *wrong_root)
    print(f"\n{prepared.value}")
    with pytest.raises(AirflowFailException) as submitted:  # what a training task needs before it submits
        TrainingBackendHook().job_setup("local").checked()
    assert str(submitted.value).startswith("connection ml_training_default: ")
    _names_root_and_connection(str(submitted.value), *wrong_root)


def test_a_training_task_with_a_missing_bucket_fails_before_any_job_starts(s3, airflow_db, monkeypatch, tmp_path,
                                                                           capfd):
    root = f"s3://{s3.new_bucket('wrong')}-missing/ml"
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", s3.airflow_connection())
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT", json.dumps({"conn_type": "ml_training", "extra": {
        "artifact_root": root, "artifact_conn_id": CONN, "local_root": str(tmp_path / "ml")}}))
    result = run(load_dag(TEST_DAGS / "ml_pod_output_test_dags.py", "wrong_artifact_root"))
    assert result.states == {("train", -1): "failed"}
    _names_root_and_connection(capfd.readouterr().out, root)
    assert not (tmp_path / "ml" / "jobs").exists() or not any((tmp_path / "ml" / "jobs").iterdir())
