"""MLflow records of a search (real MLflow, SQLite store): a restarted search reuses its parent run and
logs no trial twice; the plot and the trials table are artifacts of the parent run."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

from airflow_ml_provider.search.runner import summarize
from airflow_ml_provider.search.space import parse_settings, parse_space
from airflow_ml_provider.search.study import open_storage, open_study
from airflow_ml_provider.search.tracking import MlflowSearchLog

pytestmark = pytest.mark.integration


def test_a_restarted_search_reuses_its_parent_run_and_logs_each_trial_once(tmp_path):
    from mlflow import MlflowClient  # imported by the test that runs, not by every worker's collection

    uri, artifacts = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts"
    space, settings = parse_space({"leaves": [4, 8, 16]}), parse_settings(sampler="grid", seed=0)
    experiment = MlflowClient(uri).create_experiment("searches", artifact_location=str(artifacts))

    def session():
        study = open_study(open_storage(f"sqlite:///{tmp_path / 'optuna.db'}"), "d/search/r",
                           settings, space)
        return study, MlflowSearchLog(uri, experiment)

    def finish_trial(study, log, state):
        trial = study.ask()
        leaves = space.suggest(trial)["leaves"]
        for step in (1, 2):
            trial.report(leaves / 100 * step, step)
        frozen = study.tell(trial, leaves / 50 if state is TrialState.COMPLETE else None, state=state)
        log.log_trial(frozen, "auc")

    study, log = session()
    parent = log.start(study, settings, space)
    finish_trial(study, log, TrialState.COMPLETE)
    finish_trial(study, log, TrialState.PRUNED)

    study, log = session()  # the task restarted
    assert log.start(study, settings, space) == parent
    for trial in study.trials:  # a restarted session logs what it finishes; already-logged trials are skipped
        log.log_trial(trial, "auc")
    finish_trial(study, log, TrialState.COMPLETE)
    log.finish(study, summarize(study), "auc")

    client = MlflowClient(uri)
    runs = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent}'")
    by_number = {int(run.data.tags["optuna.trial_number"]): run for run in runs}
    assert len(runs) == 3 and sorted(by_number) == [0, 1, 2]
    assert [by_number[n].info.status for n in (0, 1, 2)] == ["FINISHED", "KILLED", "FINISHED"]
    assert "final_auc" not in by_number[1].data.metrics  # pruned: only its steps
    assert [m.step for m in client.get_metric_history(by_number[1].info.run_id, "auc")] == [1, 2]
    parent_run = client.get_run(parent)
    assert parent_run.info.status == "FINISHED"
    assert parent_run.data.metrics["best_auc"] == max(t.value for t in study.trials if t.value is not None)
    stored = {path.name for path in artifacts.rglob("*") if path.is_file()}
    assert {"trials.png", "trials.json", "search_space.json"} <= stored


def test_a_search_recorded_only_when_it_ends_logs_every_trial(tmp_path):
    """What a deferred search does when its trigger fires: the trials ran in the triggerer, unlogged;
    the resumed task opens the parent run and ``finish`` records each of them."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    space, settings = parse_space({"leaves": [4, 8, 16]}), parse_settings(sampler="grid", seed=0)
    experiment = MlflowClient(uri).create_experiment("deferred", artifact_location=str(tmp_path / "artifacts"))
    study = open_study(open_storage(f"journal://{tmp_path / 'optuna.journal'}"), "d/search/r", settings, space)
    for _ in range(3):
        trial = study.ask()
        study.tell(trial, space.suggest(trial)["leaves"] / 50)

    log = MlflowSearchLog(uri, experiment)
    parent = log.start(study, settings, space)
    log.finish(study, summarize(study), "auc")

    runs = MlflowClient(uri).search_runs([experiment], f"tags.mlflow.parentRunId = '{parent}'")
    assert sorted(int(run.data.tags["optuna.trial_number"]) for run in runs) == [0, 1, 2]
    assert {run.data.metrics["final_auc"] for run in runs} == {0.08, 0.16, 0.32}
