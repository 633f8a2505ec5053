"""A recipe search in a real DAG run (dag.test()): choice values are data, never Airflow templates.

Issue 12, item 1: the choice ``{{ 7*7 }}`` became ``49``, and ``{{ var.value.x }}`` read an Airflow
Variable, because the search operator's template fields were rendered with the run's context.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from dag_runs import load_dag, run

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.recipes import load_recipe
from support import TEST_DAGS

pytestmark = pytest.mark.integration

RECIPE = Path(__file__).resolve().parents[2] / "fixtures" / "recipes" / "search_injection.yaml"


def _argv(backend: LocalBackend, job_name: str) -> list[str]:
    lines = backend.log_source(job_name).read(None, 1000).lines
    (argv,) = [json.loads(line.text.removeprefix("ARGV ")) for line in lines if line.text.startswith("ARGV ")]
    return argv


def test_recipe_search_choices_reach_the_trials_argv_as_literal_text(airflow_db, monkeypatch):
    monkeypatch.setenv("AIRFLOW_VAR_AML_RECIPE_SECRET", "variable-value-leaked")
    choices = load_recipe(RECIPE).experiments["tune"].parameters["note"]

    result = run(load_dag(TEST_DAGS / "ml_recipe_search_test_dags.py", "search_injection"))

    assert result.state == "success", result.states
    summary = result.value("tune")
    backend = LocalBackend(Path(os.environ["AIRFLOW_HOME"]) / "ml")
    by_choice = {trial["params"]["note"]: _argv(backend, trial["job_name"]) for trial in summary["trials"]}
    assert by_choice == {choice: [f"--note={choice}"] for choice in choices}
    assert "variable-value-leaked" not in json.dumps(summary)
