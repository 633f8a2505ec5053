"""A running search's trials as the training view reads them: from the task instance's own Optuna study (a real
journal storage), read-only, the best so far marked; a storage named by a template or unreadable is said."""

from __future__ import annotations

from types import SimpleNamespace

import optuna

from airflow_ml_provider.plugins.search_trials import is_search, live_trials
from airflow_ml_provider.search.study import open_storage


def search_task(storage_url):
    return SimpleNamespace(task_type="HyperparameterSearchOperator", storage_url=storage_url)


def test_the_trials_so_far_with_the_best_marked_and_a_running_one_listed(tmp_path):
    url = f"journal://{tmp_path / 'search.journal'}"
    study = optuna.create_study(study_name="dag/search/run-1", storage=open_storage(url), direction="maximize")
    for x in (0.2, 0.9, 0.5):
        trial = study.ask()
        trial.set_user_attr("job_name", f"job-{trial.number}")
        study.tell(trial, x)
    study.ask()  # still running
    found = live_trials(search_task(url), "dag", "search", "run-1", -1)
    assert found["best_trial"] == 1
    assert [(t["number"], t["state"], t["value"], t["job_name"]) for t in found["trials"]] == [
        (0, "COMPLETE", 0.2, "job-0"), (1, "COMPLETE", 0.9, "job-1"), (2, "COMPLETE", 0.5, "job-2"),
        (3, "RUNNING", None, None)]
    assert live_trials(search_task(url), "dag", "search", "run-2", -1) == {"trials": [], "best_trial": None}


def test_no_search_a_templated_storage_and_an_unreadable_one(tmp_path):
    assert live_trials(SimpleNamespace(task_type="LightGBMTrainingOperator"), "d", "t", "r", -1) is None
    assert "named by a template" in live_trials(search_task("{{ var.value.db }}"), "d", "t", "r", -1)["note"]
    told = live_trials(search_task("postgresql://u:secret@127.0.0.1:1/none"), "d", "t", "r", -1)["note"]
    assert told.startswith("its study could not be read here") and "secret" not in told


def test_a_recipe_search_is_a_search_in_the_serialized_dag_the_api_server_reads():
    """The API server has the serialized DAG only, whose operators keep their class name but not their bases: the
    recipe search (a RecipeSearchOperator) is a search there too."""
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_ml_provider.recipes import dag_from_recipe
    from support import REPO

    recipe = dag_from_recipe(REPO / "tests" / "fixtures" / "recipes" / "view_search.yaml")
    served = DagSerialization.from_dict(DagSerialization.to_dict(recipe))
    assert {task_id: is_search(task) for task_id, task in served.task_dict.items()} == {"tune": True}


def test_a_recipe_searchs_objective_is_read_from_what_its_search_recorded_in_its_study(tmp_path, monkeypatch):
    """The serialized recipe search has no settings (no template fields): the view reads the objective's metric from
    the study, where the search's own open_study recorded it, and its direction from the study."""
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_ml_provider.jobs.naming import JobIdentity
    from airflow_ml_provider.plugins.search_trials import one_trial
    from airflow_ml_provider.recipes import dag_from_recipe
    from airflow_ml_provider.search.study import study_name
    from support import REPO

    monkeypatch.setenv("AIRFLOW__ML_TRAINING__SEARCH_STORAGE_URL", f"journal://{tmp_path / 'search.journal'}")
    recipe = dag_from_recipe(REPO / "tests" / "fixtures" / "recipes" / "view_search.yaml")  # loss, minimize
    served = DagSerialization.from_dict(DagSerialization.to_dict(recipe)).task_dict["tune"]
    assert getattr(served, "search", None) is None  # what the view cannot read it from
    study = recipe.task_dict["tune"].search_setup().study(study_name(JobIdentity(recipe.dag_id, "tune", "run-1", -1)))
    trial = study.ask()
    study.tell(trial, 0.25)
    found = live_trials(served, recipe.dag_id, "tune", "run-1", -1)
    assert (found["objective_metric"], found["direction"], found["best_trial"]) == ("loss", "minimize", 0)
    trial = one_trial(served, recipe.dag_id, "tune", "run-1", -1, 0)
    assert (trial["objective_metric"], trial["direction"], trial["value"]) == ("loss", "minimize", 0.25)


def test_a_study_that_recorded_no_objective_gives_its_direction_only(tmp_path):
    url = f"journal://{tmp_path / 'search.journal'}"
    optuna.create_study(study_name="dag/search/run-1", storage=open_storage(url), direction="minimize")
    found = live_trials(search_task(url), "dag", "search", "run-1", -1)
    assert (found["objective_metric"], found["direction"]) == (None, "minimize")
