"""HyperparameterSearchOperator in a real DAG run (dag.test()): LightGBM trials on the local backend,
the result in XCom, the study in its own journal file, the runs in MLflow."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.drivers import replay

pytestmark = pytest.mark.integration


def test_search_dag_returns_best_trial_and_records_every_trial(run_dag):
    result = run_dag("ml_test_search")
    assert result.state == "success", result.task_states
    out = result.xcom["search"]
    home = Path(os.environ["AIRFLOW_HOME"])
    backend = LocalBackend(home / "ml")

    trials = out["trials"]
    assert [t["number"] for t in trials] == [0, 1, 2, 3]
    assert all(t["state"] == "COMPLETE" for t in trials), trials
    best = max(trials, key=lambda t: t["value"])
    assert (out["best_trial"], out["best_value"], out["best_params"]) == (best["number"], best["value"], best["params"])
    assert out["study_name"] == f"ml_test_search/search/{result.run_id}"

    for trial in trials:  # each job ran the template with this trial's values, as typed JSON
        spec = json.loads((backend.job_dir(trial["job_name"]) / "job.json").read_text())["spec"]
        command = spec["command"]
        lightgbm_params = json.loads(command[command.index("--params-json") + 1])
        assert {k: lightgbm_params[k] for k in trial["params"]} == trial["params"]
        assert command[command.index("--num-boost-round") + 1] == "15"  # the DAG's param, rendered by Airflow
        assert command[command.index("--train-data") + 1] == str(home / "ml" / "data" / "search-test" / "train.npz")
        metrics = replay(backend.log_source(trial["job_name"])).tracker
        assert metrics.final["auc"] == trial["value"]
    assert Path(out["best_model_path"]).is_file()
    assert (home / "ml" / "search" / "optuna.journal").is_file(), "the study has its own storage, not airflow.db"

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{home / 'ml' / 'mlflow.db'}")
    parent = client.get_run(out["mlflow_run_id"])
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["best_auc"] == pytest.approx(out["best_value"])
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    by_number = {int(run.data.tags["optuna.trial_number"]): run for run in children}
    assert sorted(by_number) == [0, 1, 2, 3]
    for trial in trials:
        child = by_number[trial["number"]]
        assert child.data.metrics["final_auc"] == pytest.approx(trial["value"])
        assert json.loads(child.data.params["num_leaves"]) == trial["params"]["num_leaves"]
        assert len(client.get_metric_history(child.info.run_id, "auc")) == 15  # one point per boosting round
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"trials.png", "trials.json", "search_space.json"} <= artifacts
