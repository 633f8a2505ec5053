"""The trials of searches and sweeps in their views, in real runs (dag.test(), the metadata database the API server
reads): a recipe search's view and trial pages name its objective's metric and direction, from what the search
recorded (its serialized task has no settings); a recipe sweep's ``.best`` view lists the sweep's mapped task
instances, each linking to its own view and its log, the best marked; and a new try of a search task starts with
none of the trial views (``ml_trial_view_<n>``) an earlier try saved, as Airflow clears a try's XComs, so an earlier
try's trial shows the study's record and no stale job view, while the trial the new try ran shows its own."""

from __future__ import annotations

import json
import re
import runpy
from html import unescape
from urllib.parse import quote, urljoin

import pytest
from dag_runs import load_dag, run

from airflow_ml_provider.plugins.training_view import page
from airflow_ml_provider.plugins.trial_view import trial_page
from airflow_ml_provider.plugins.view_app import read, read_trial
from support import TEST_DAGS

pytestmark = pytest.mark.integration


def _trial_views(dag_id: str, run_id: str) -> dict[str, object]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(select(XComModel).where(XComModel.dag_id == dag_id, XComModel.run_id == run_id,
                                                       XComModel.key.like("ml_trial_view_%"))).all()
        return {row.key: XComModel.deserialize_value(row) for row in rows}


def test_a_recipe_searchs_view_and_trial_pages_name_its_metric_and_direction(airflow_db):
    """tests/fixtures/recipes/search_injection.yaml: ``objective: score, direction: maximize``, a grid of 4."""
    result = run(load_dag(TEST_DAGS / "ml_recipe_search_test_dags.py", "search_injection"))
    assert result.state == "success", result.states
    dag_id = "recipe_ml_test_recipe_search_injection"
    data = read(dag_id, result.run_id, "tune")
    assert (data["search"]["objective_metric"], data["search"]["direction"]) == ("score", "maximize")
    html = page(data)
    assert "score per trial (maximize)" in html and "<th>score (maximize)</th>" in html and "objective" not in html
    best = data["search"]["best_trial"]
    trial = read_trial(dag_id, result.run_id, "tune", -1, best)
    html = trial_page(trial)
    value = next(t["value"] for t in data["search"]["trials"] if t["number"] == best)
    assert f"<tr><th>score (maximize)</th><td>{value}</td></tr>" in html and "objective" not in html


def test_a_sweeps_best_view_lists_its_mapped_trials_linking_to_their_views_and_logs(airflow_db, monkeypatch):
    """tests/fixtures/recipes/params_best.yaml: 3 trials (x = 1, 2, 3) scored x * scale, the highest best."""
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session

    from airflow_ml_provider.plugins.sweep_trials import sweep_trials

    result = run(load_dag(TEST_DAGS / "ml_recipe_test_dags.py", "params_best"), {"scale": 2.0})
    assert result.state == "success", result.states
    dag_id, run_id = "recipe_params_best_test", result.run_id
    data = read(dag_id, run_id, "sweep.best")
    sweep = data["search"]
    xs = [t["params"]["x"] for t in result.mapped("sweep")]  # by map index
    assert sweep["sweep"] == "sweep" and sweep["best_trial"] == xs.index(3), sweep
    assert [(t["number"], t["state"], t["value"], t["params"]) for t in sweep["trials"]] == [
        (index, "success", 2.0 * x, {"x": x}) for index, x in enumerate(xs)]
    assert [t["job_name"] for t in sweep["trials"]] == [t["job_name"] for t in result.mapped("sweep")]
    html = page(data)
    assert "score per trial (maximize)" in html and "<th>score (maximize)</th>" in html
    rows = re.findall(r"<tr class='(best)?'><td><a href='([^']+)'>(\d)</a>( \(best\))?</td>.*?"
                      r"<td><a href='([^']+)'>log</a></td></tr>", html)
    base = f"http://airflow/ml-training/ti/{dag_id}/{quote(run_id, safe='')}/sweep.best?map_index=-1"
    for best, view, number, _, log in rows:
        assert urljoin(base, unescape(view)) == (
            f"http://airflow/ml-training/ti/{dag_id}/{quote(run_id, safe='')}/sweep?map_index={number}")
        assert urljoin(base, unescape(log)) == (
            f"http://airflow/dags/{dag_id}/runs/{quote(run_id, safe='')}/tasks/sweep/mapped/{number}")
        assert bool(best) == (int(number) == xs.index(3))
    assert [number for _, _, number, _, _ in rows] == ["0", "1", "2"], html
    trial = read(dag_id, run_id, "sweep", 1)  # the page a trial's link opens: its job's view
    assert trial["view"]["job"] == sweep["trials"][1]["job_name"] and trial["view"]["state"] == "SUCCEEDED"
    assert f"{dag_id} / sweep [1]: task success, job SUCCEEDED" in page(trial)
    # before .best has run (no summary): the sweep's task instances, from its one upstream task, none best
    with create_session() as session:
        task = SerializedDagModel.get(dag_id, session=session).dag.task_dict["sweep.best"]
        early = sweep_trials(session, task, dag_id, run_id, None)
    assert early["sweep"] == "sweep" and early["best_trial"] is None and early["objective_metric"] is None
    assert [(t["number"], t["value"], t["params"]) for t in early["trials"]] == [
        (index, None, {"x": x}) for index, x in enumerate(xs)]
    monkeypatch.setattr("airflow_ml_provider.plugins.sweep_trials.MAX_TRIALS_SHOWN", 2)  # the first map indexes
    assert [t["number"] for t in read(dag_id, run_id, "sweep.best")["search"]["trials"]] == [0, 1]


@pytest.mark.parametrize("dag_id", ["ml_test_search_retry", "ml_test_search_retry_deferred"])
def test_a_new_try_of_a_search_keeps_no_trial_view_of_the_earlier_try(airflow_db, dag_id):
    """The first try ran trials 0 and 1 (on the worker, or in the triggerer) and saved their views, then failed;
    the second ran trial 2. What remains: trial 2's view only; trials 0 and 1 keep their study record."""
    dags = runpy.run_path(str(TEST_DAGS / "ml_search_retry_test_dags.py"))
    views_file = dags["views_file"](dag_id)
    views_file.unlink(missing_ok=True)

    result = run(dags[dag_id])

    assert result.state == "success", result.states
    summary = result.value("search")
    jobs = {t["number"]: t["job_name"] for t in summary["trials"]}
    assert sorted(jobs) == [0, 1, 2] and all(t["state"] == "COMPLETE" for t in summary["trials"]), summary
    first_try = {int(number): job for number, job in json.loads(views_file.read_text()).items()}
    assert first_try == {0: jobs[0], 1: jobs[1], 2: None}, first_try  # the first try saved its trials' views
    assert set(_trial_views(dag_id, result.run_id)) == {"ml_trial_view_2"}
    for number in (0, 1):  # the earlier try's trials: the study's record, no job view
        data = read_trial(dag_id, result.run_id, "search", -1, number)
        assert data["view"] == {} and data["trial"]["state"] == "COMPLETE" and data["trial"]["job_name"] == jobs[number]
        html = trial_page(data)
        assert "an earlier try of the search task ran" in html and "on backend local" not in html
        assert f"<tr><th>score (maximize)</th><td>{data['trial']['value']}</td></tr>" in html
    data = read_trial(dag_id, result.run_id, "search", -1, 2)
    assert data["view"]["job"] == jobs[2] and data["view"]["state"] == "SUCCEEDED", data["view"]
    assert f"Job <code>{jobs[2]}</code> on backend local" in trial_page(data)
