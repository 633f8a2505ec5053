"""The connection types' names are URI schemes (RFC 3986: letters, digits, '+', '-', '.'), so Airflow no longer
warns that a scheme contains '_' on every connection read; connections made with the old names still work,
with a deprecation warning naming the new type."""

from __future__ import annotations

import json
import re
import warnings

import pytest
from airflow.exceptions import AirflowProviderDeprecationWarning

from airflow_ml_provider.get_provider_info import get_provider_info
from airflow_ml_provider.hooks.model_registry import ModelRegistryHook
from airflow_ml_provider.hooks.training_backend import TrainingBackendHook


def test_every_connection_type_is_a_uri_scheme():
    declared = [conn["connection-type"] for conn in get_provider_info()["connection-types"]]
    assert declared == ["mltraining", "mlregistry"]
    assert all(re.fullmatch(r"[a-z][a-z0-9+.-]*", conn_type) for conn_type in declared)
    assert (TrainingBackendHook.conn_type, ModelRegistryHook.conn_type) == ("mltraining", "mlregistry")


@pytest.mark.parametrize(("old", "new", "read"), [
    ("ml_training", "mltraining", lambda: TrainingBackendHook("ml_renamed").settings().artifact_root),
    ("ml_registry", "mlregistry", lambda: ModelRegistryHook("ml_renamed").settings().artifact_root),
])
def test_a_connection_of_the_old_type_still_reads_with_a_deprecation_warning(monkeypatch, old, new, read):
    fields = {"host": "http://mlflow:5000", "extra": {"artifact_root": "s3://bucket/mlflow"}}
    monkeypatch.setenv("AIRFLOW_CONN_ML_RENAMED", json.dumps({"conn_type": old, **fields}))
    with pytest.warns(AirflowProviderDeprecationWarning,
                      match=rf"connection 'ml_renamed': the connection type '{old}' is deprecated; make it '{new}'"):
        assert read() == "s3://bucket/mlflow"

    monkeypatch.setenv("AIRFLOW_CONN_ML_RENAMED", json.dumps({"conn_type": new, **fields}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", AirflowProviderDeprecationWarning)
        assert read() == "s3://bucket/mlflow"
