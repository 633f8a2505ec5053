"""A fresh deployment's embedded registry (issue 40): two tasks reaching MLflow's SQLite store at once both
migrated it and both failed (``Online migration expected to match one row ... 0 found``). The store is
created under a lock beside it; two processes that use a fresh store at the same moment both succeed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support import REPO

pytestmark = pytest.mark.integration

FIRST_USE = """
import os, sys, time
import mlflow
from airflow_ml_provider.hooks.model_registry import ModelRegistryHook
hook = ModelRegistryHook("ml_registry_fresh")
hook.settings()
print("ready", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.002)
print(hook.experiment_id("ml_training_pipeline"), hook.alias_version("m", "champion"), flush=True)
"""


def test_two_first_uses_of_a_fresh_store_at_once_both_succeed(tmp_path):
    database = tmp_path / "registry" / "mlflow.db"
    database.parent.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "AIRFLOW_CONN_ML_REGISTRY_FRESH": json.dumps({
               "conn_type": "mlregistry", "host": f"sqlite:///{database}",
               "extra": {"artifact_root": (tmp_path / "artifacts").as_uri()}})}
    go = tmp_path / "go"
    tasks = [subprocess.Popen([sys.executable, "-c", FIRST_USE, str(go)], env=env, cwd=tmp_path, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    for task in tasks:
        assert task.stdout.readline().strip() == "ready", task.communicate()[1][-3000:]
    assert not database.exists(), "precondition: nothing touched the store before the start"
    go.touch()
    results = [task.communicate(timeout=300) for task in tasks]
    for task, (out, err) in zip(tasks, results, strict=True):
        assert task.returncode == 0, err[-3000:]
    assert {out.strip() for out, _ in results} == {"1 None"}, results  # one experiment, the same for both
