"""Where the registry hook points MLflow: the embedded SQLite default, or a tracking server connection."""

from __future__ import annotations

import json

from airflow_ml_provider.hooks.model_registry import ModelRegistryHook


def test_without_a_connection_the_embedded_sqlite_registry_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    settings = ModelRegistryHook("ml_registry_absent").settings()
    assert settings.tracking_uri == settings.registry_uri == f"sqlite:///{tmp_path}/ml/mlflow.db"
    assert settings.artifact_root == (tmp_path / "ml" / "mlartifacts").as_uri()
    assert settings.authorization is None


def test_a_connection_names_the_tracking_server_and_its_credentials(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_ML_REGISTRY_TEST", json.dumps({
        "conn_type": "ml_registry", "host": "mlflow.internal", "schema": "https", "port": 5443,
        "login": "airflow", "password": "s3cret",
        "extra": {"registry_uri": "databricks-uc", "artifact_root": "s3://bucket/mlflow"},
    }))
    settings = ModelRegistryHook("ml_registry_test").settings()
    assert settings.tracking_uri == "https://mlflow.internal:5443"
    assert (settings.registry_uri, settings.artifact_root) == ("databricks-uc", "s3://bucket/mlflow")
    assert settings.ui_url == "https://mlflow.internal:5443"
    assert settings.authorization == "Basic YWlyZmxvdzpzM2NyZXQ="  # airflow:s3cret, sent as a header only
    assert ModelRegistryHook("ml_registry_test").version_url("m", 3) == "https://mlflow.internal:5443/#/models/m/versions/3"


def test_the_embedded_registry_has_no_mlflow_link_unless_a_ui_is_configured(tmp_path, monkeypatch):
    """Issue 40: task links pointed at http://127.0.0.1:5000, which nothing serves in a pip deployment."""
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.delenv("AIRFLOW__ML_TRAINING__MLFLOW_UI_URL", raising=False)
    hook = ModelRegistryHook("ml_registry_absent")
    assert (hook.settings().ui_url, hook.version_url("m", 1), hook.run_url("1", "r")) == ("", "", "")
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__MLFLOW_UI_URL", "http://127.0.0.1:5000")  # as make ui sets it
    assert hook.version_url("m", 1) == "http://127.0.0.1:5000/#/models/m/versions/1"


def test_a_connection_without_an_http_ui_has_no_mlflow_link(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_ML_REGISTRY_SQL", json.dumps(
        {"conn_type": "mlregistry", "host": "postgresql+psycopg://db.example.com/mlflow"}))
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__MLFLOW_UI_URL", "http://127.0.0.1:5000")  # the embedded one's only
    hook = ModelRegistryHook("ml_registry_sql")
    assert (hook.version_url("m", 1), hook.run_url("1", "r")) == ("", "")
    monkeypatch.setenv("AIRFLOW_CONN_ML_REGISTRY_SQL", json.dumps(
        {"conn_type": "mlregistry", "host": "postgresql+psycopg://db.example.com/mlflow",
         "extra": {"ui_url": "https://mlflow.example.com/"}}))
    assert hook.version_url("m", 1) == "https://mlflow.example.com/#/models/m/versions/1"
