"""A recipe's Optuna search over XGBoost parameters in a real DAG run (dag.test(), local backend): every trial a
2-worker XGBoost job with its tracker, its per-round validation AUC read from the trial's log as the search's
objective; the best trial is reported with the parameters it ran with."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dag_runs import load_dag, run

from airflow_ml_provider.runtime.datasets import write_synthetic
from support import TEST_DAGS, needs_training_env

pytestmark = [pytest.mark.integration, needs_training_env]


def test_a_tpe_search_over_xgboost_parameters_runs_two_worker_trials(airflow_db):
    data = Path(os.environ["AIRFLOW_HOME"]) / "ml" / "data" / "xgboost_search"  # the local root's data/: jobs see it
    data.mkdir(parents=True, exist_ok=True)
    write_synthetic(data / "train.npz", data / "valid.npz", rows=8_000, features=10, seed=5)

    result = run(load_dag(TEST_DAGS / "ml_recipe_search_test_dags.py", "xgboost_search"),
                 {"train": str(data / "train.npz"), "valid": str(data / "valid.npz")})

    assert result.state == "success", result.states
    summary = result.value("tune")
    trials = summary["trials"]
    assert len(trials) == 4 and summary["n_failed"] == 0, summary
    complete = [trial for trial in trials if trial["state"] == "COMPLETE"]
    assert len(complete) == summary["n_complete"] >= 2 and summary["n_complete"] + summary["n_pruned"] == 4, trials
    assert all(0.8 < trial["value"] <= 1.0 for trial in complete), trials  # validation AUCs of real models
    assert summary["best_value"] == max(trial["value"] for trial in complete), summary
    assert summary["best_params"]["max_depth"] in (2, 4, 6) and summary["best_model_path"].endswith("/model.ubj")
