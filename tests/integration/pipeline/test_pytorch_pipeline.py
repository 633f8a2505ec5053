"""The shipped pipeline with ``framework=pytorch``, run for real with dag.test(): preprocessing, a 2-worker
DDP job under torchrun on the local backend, evaluation of its ``model.pt`` in the training environment,
the gate and the real MLflow registry (SQLite)."""

from __future__ import annotations

import uuid

import pytest
from dag_runs import run

from airflow_ml_provider.hooks.model_registry import CHAMPION
from support import needs_torch

pytestmark = [pytest.mark.integration, needs_torch]

MODEL = f"ml_training_pipeline.torch_{uuid.uuid4().hex[:8]}"  # one of the DAG's own names


def test_a_pytorch_model_is_trained_evaluated_and_registered(pipeline, registry):
    result = run(pipeline, {"model_name": MODEL, "framework": "pytorch", "epochs": 5, "gate_metric": "accuracy",
                            "min_accuracy": 0.6})
    assert result.state == "success", result.states
    assert result.states[("train_pytorch", -1)] == "success"
    assert result.states[("train_lightgbm", -1)] == result.states[("train_horovod", -1)] == "skipped"
    trained, evaluation = result.value("train_pytorch"), result.value("evaluate")
    assert trained["model_path"].endswith("/model.pt") and trained["metrics"]["world_size"] == 2
    assert evaluation["framework"] == "pytorch" and evaluation["metrics"]["accuracy"] > 0.6, evaluation
    deploy = result.value("deploy")
    assert (deploy["version"], deploy["promoted"]) == (1, True), deploy
    assert registry.alias_version(MODEL, CHAMPION)["version"] == 1
    with registry.mlflow() as mlflow:
        tags = mlflow.MlflowClient().get_model_version(MODEL, "1").tags
    assert tags["framework"] == "pytorch" and tags["airflow.training_job"] == trained["job_name"]
