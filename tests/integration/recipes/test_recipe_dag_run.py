"""A recipe DAG run for real: every trial's hostile value reaches its job as one literal argument."""

from __future__ import annotations

from pathlib import Path

import pytest
from dag_runs import load_dag, run

from airflow_ml_provider.recipes import load_recipe
from support import TEST_DAGS

pytestmark = pytest.mark.integration

RECIPE = Path(__file__).resolve().parents[2] / "fixtures" / "recipes" / "injection.yaml"
MARKERS = [Path(f"/tmp/aml-recipe-injection-{i}") for i in (1, 2, 3)]


def test_hostile_recipe_values_are_passed_as_data_and_never_executed(airflow_db):
    for marker in MARKERS:
        marker.unlink(missing_ok=True)
    trials = load_recipe(RECIPE).trials("echo")

    result = run(load_dag(TEST_DAGS / "ml_recipe_test_dags.py", "injection"))

    assert result.state == "success", result.states
    assert result.states == {**{("echo", i): "success" for i in range(len(trials))}, ("after", 0): "success"}
    for trial, xcom in zip(trials, result.mapped("echo"), strict=True):
        assert xcom["metrics"]["argv"] == [trial.params["value"], f"--trial={trial.index}"]
        assert xcom["params"] == trial.params
    assert {x["metrics"]["argv"][0] for x in result.mapped("echo")} >= {"{{ 7 * 7 }}", "{% raw %}$HOME"}
    assert not [m for m in MARKERS if m.exists()], "a value was executed by a shell"
    assert result.mapped("after")[0]["state"] == "SUCCEEDED"


def test_run_dir_is_the_runs_own_data_folder_shared_by_its_experiments(airflow_db):
    """Issue 25 D11: a recipe's jobs hand files on through ``{{run_dir}}``, the DAG run's own folder under
    the artifact root, instead of a fixed /tmp path (shared by every run and deployment on the host, and
    private to each job in the local sandbox)."""
    from airflow_ml_provider.hooks.training_backend import TrainingBackendHook

    dag = load_dag(TEST_DAGS / "ml_recipe_test_dags.py", "run_dir")
    result = run(dag)
    assert result.state == "success", result.states
    folder = TrainingBackendHook().run_data_dir(dag.dag_id, result.run_id)
    assert (folder / "handed-over.txt").read_text() == "from write"
    assert str(folder).startswith(TrainingBackendHook().artifact_store().root + "/data/")


def test_recipe_params_reach_the_trials_as_data_and_the_sweep_reports_its_best_trial(airflow_db, capfd, monkeypatch):
    """Issue 25 D11: a recipe's Params (its trigger form) reach every trial as argv data, never scanned for
    another placeholder or run by a shell, and ``sweep.best`` names the best trial in its log, its XCom
    and an MLflow run its link opens."""
    from airflow_ml_provider.hooks.model_registry import ModelRegistryHook

    marker = Path("/tmp/aml-recipe-param")
    marker.unlink(missing_ok=True)
    # an MLflow UI served over the embedded registry (make ui sets this): the best trial's link goes there
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__MLFLOW_UI_URL", "http://mlflow.example.com")
    label = "{{run_dir}} {{params.scale}} $(touch /tmp/aml-recipe-param) ü é"
    result = run(load_dag(TEST_DAGS / "ml_recipe_test_dags.py", "params_best"), {"scale": 2.5, "label": label,
                                                                                "repeat": 3})

    assert result.state == "success", result.states
    assert [x["metrics"]["argv"] for x in result.mapped("sweep")] == [[label, "3"]] * 3
    assert not marker.exists()
    best, top = result.value("sweep.best"), next(x for x in result.mapped("sweep") if x["params"] == {"x": 3})
    assert (best["best_trial"], best["best_params"], best["best_value"], best["n_reported"]) == (
        top["map_index"], {"x": 3}, 7.5, 3)
    assert best["best_job_name"] == top["job_name"]
    printed = capfd.readouterr()
    assert (f"Best trial of sweep: #{top['map_index']} (x=3): score = 7.5 (maximize; 3 of 3 trials reported it); "
            f"job {top['job_name']}; MLflow: {best['url']}") in printed.out + printed.err
    with ModelRegistryHook().mlflow() as mlflow:
        recorded = mlflow.MlflowClient().get_run(best["mlflow_run_id"])
    assert (recorded.data.metrics["best_score"], recorded.data.params["x"]) == (7.5, "3")
    assert best["url"] == (f"http://mlflow.example.com/#/experiments/{recorded.info.experiment_id}"
                           f"/runs/{best['mlflow_run_id']}")


def test_a_param_the_schema_cannot_refuse_fails_the_first_task_naming_it(airflow_db):
    """NaN arrives as null through JSON (past every bound) and 2.0 passes as an integer: each trial refuses
    the run for good, naming the Param in its own words, before any job starts."""
    from airflow.sdk.exceptions import ParamValidationError

    dag = load_dag(TEST_DAGS / "ml_recipe_test_dags.py", "params_best")
    with pytest.raises(ParamValidationError, match="Scale: a number from 0.5 to 4"):
        run(dag, {"scale": 40})
    result = run(dag, {"scale": None, "repeat": 2.0})
    assert result.state == "failed"
    assert {state for (task, _), state in result.states.items() if task == "sweep"} == {"failed"}
    assert not [v for v in result.mapped("sweep") if v]
