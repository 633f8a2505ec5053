"""The training connection's ``orphan_grace_s`` extra reaches the local backend (default 600 s)."""

from __future__ import annotations

import json

from airflow_ml_provider.hooks.training_backend import TrainingBackendHook


def test_orphan_grace_comes_from_the_connection_extra(tmp_path, monkeypatch):
    extra = {"backend": "local", "local_root": str(tmp_path), "orphan_grace_s": "45"}
    monkeypatch.setenv("AIRFLOW_CONN_ML_ORPHAN_TEST", json.dumps({"conn_type": "ml_training", "extra": extra}))
    assert TrainingBackendHook("ml_orphan_test").get_backend().orphan_grace_s == 45.0
    del extra["orphan_grace_s"]
    monkeypatch.setenv("AIRFLOW_CONN_ML_ORPHAN_TEST", json.dumps({"conn_type": "ml_training", "extra": extra}))
    assert TrainingBackendHook("ml_orphan_test").get_backend().orphan_grace_s == 600.0
