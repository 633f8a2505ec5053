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
