"""Issue 25 D6: registering a model and scoring with it print no warning that is not a real problem
(real MLflow, SQLite registry, a real LightGBM model): no "Failed to resolve installed pip version" on
deploy (this environment has no pip by design), no type-hint warning when scoring."""

from __future__ import annotations

import logging
import uuid

import numpy as np
import pytest

from airflow_ml_provider.hooks.model_registry import ModelRegistryHook
from airflow_ml_provider.operators.deploy import _requirements, _signature
from airflow_ml_provider.reporting.mlflow_output import mlflow_output_to_task_log

pytestmark = pytest.mark.integration


def test_registering_and_scoring_log_no_warning(airflow_db, tmp_path, capfd, caplog):
    import lightgbm as lgb

    X = np.random.default_rng(0).normal(size=(200, 4)).astype(np.float32)
    model = tmp_path / "model.txt"
    lgb.train({"objective": "binary", "verbosity": -1, "num_threads": 1}, lgb.Dataset(X, X[:, 0] > 0), 3).save_model(model)
    registry, name = ModelRegistryHook(), f"quiet_{uuid.uuid4().hex[:8]}"
    with registry.mlflow() as mlflow:
        client = mlflow.MlflowClient()
        run = client.create_run(registry.experiment_id("quiet_test"))
        client.set_terminated(run.info.run_id)
    requirements, absent = _requirements("lightgbm")
    with caplog.at_level(logging.WARNING), mlflow_output_to_task_log(absent):
        version = registry.register(name, run.info.run_id, str(model), _signature({"n_features": 4, "n_classes": 2}),
                                    requirements, {}, "")
        with registry.mlflow() as mlflow:
            loaded = mlflow.pyfunc.load_model(f"models:/{name}/{version}")
            probabilities = loaded.predict(X)
    assert probabilities.shape == (200, 2)
    printed = capfd.readouterr()
    shown = printed.out + printed.err + caplog.text
    assert "pip version" not in shown and "type hint" not in shown, shown
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    with registry.mlflow() as mlflow:
        env = mlflow.artifacts.load_text(f"{registry.download_uri(name, version)}/requirements.txt")
    assert "lightgbm==" in env and "numpy==" in env
