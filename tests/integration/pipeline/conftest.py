"""The pipeline DAG and the model registry, shared by this folder's test modules (one of each per module)."""

from __future__ import annotations

import pytest
from dag_runs import load_dag

from airflow_ml_provider.hooks.model_registry import ModelRegistryHook
from support import REPO


@pytest.fixture(scope="module")
def pipeline(airflow_db):
    return load_dag(REPO / "dags" / "ml_training_pipeline.py")


@pytest.fixture(scope="module")
def registry():
    return ModelRegistryHook()
