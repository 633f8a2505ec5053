"""Parameter-server training through its operator in a real DAG run (dag.test(), local backend, real processes):
the task's summary carries the chief's metrics, model and result, and the job ran its five processes by role."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

from airflow_ml_provider.hooks.model_registry import TRAINED_BY
from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.runtime.datasets import load_digits_split
from airflow_ml_provider.runtime.predict import load_predictor
from support import needs_training_env

pytestmark = [pytest.mark.integration, needs_training_env]


def test_the_operator_trains_two_ps_two_workers_and_a_chief_and_returns_the_chiefs_results(run_dag):
    result = run_dag("ml_test_parameter_servers")
    assert result.state == "success", result.task_states
    summary = result.xcom["train"]
    assert summary["state"] == "SUCCEEDED", summary
    assert Path(summary["model_path"]).name == "model.npz" and Path(summary["model_path"]).is_file()
    job_dir = LocalBackend(Path(os.environ["AIRFLOW_HOME"]) / "ml").job_dir(summary["job_name"])
    log = (job_dir / "output.log").read_text()
    assert set(re.findall(r"^\[((?:ps|worker) \d)\] ", log, re.M)) == {"ps 0", "ps 1", "worker 0", "worker 1"}, log
    losses = [float(loss) for loss in re.findall(r'^\[chief 0\] \{"event": "metrics", "loss": ([0-9.]+), "step": '
                                                 r"\d+\}$", log, re.M)]
    assert len(losses) == 15 and losses[-1] < losses[0] / 2, losses  # steps "{{ 100 + 50 }}", rendered
    assert summary["metrics"]["loss"] == pytest.approx(losses[-1]), summary
    # the registry's predictor (runtime.predict, shipped in every registered model) loads the chief's model.npz and
    # scores the trainer's held-out digits as the trainer did (a tensorflow-ps model was unloadable before)
    X_test, y_test = load_digits_split(0)[2:]
    probabilities = load_predictor(summary["model_path"])(X_test)
    assert probabilities.shape == (len(y_test), 10) and np.allclose(probabilities.sum(axis=1), 1, atol=1e-5)
    assert np.mean(probabilities.argmax(axis=1) == y_test) == pytest.approx(summary["metrics"]["accuracy"])
    assert TRAINED_BY[".npz"] == "generic", "scored in any image: the linear model needs numpy only"
