"""A search trial's page (plugins.trial_view) from a real journal study (plugins.search_trials.one_trial): the
trial's parameters, objective per step and failure as the study records them, its job's view as the search saved
it, a link back to the search and to its MLflow run; every text from the study or the job escaped. The search's
view links each trial's row and plotted point to its page."""

from __future__ import annotations

import re
from html import escape
from types import SimpleNamespace
from urllib.parse import urljoin

import optuna

from airflow_ml_provider.plugins.search_trials import one_trial
from airflow_ml_provider.plugins.training_view import page
from airflow_ml_provider.plugins.trial_view import trial_page
from airflow_ml_provider.search.study import open_storage
from airflow_ml_provider.search.tracking import PARENT_URL_ATTR

HOSTILE = "<script>alert(1)</script>"
TI = {"dag_id": "d <b>", "run_id": "manual__2026-01-01T00:00:00+00:00", "task_id": "search", "map_index": -1,
      "state": "running"}
BASE = "http://airflow/ml-training/ti/d%20%3Cb%3E/manual__2026-01-01T00%3A00%3A00%2B00%3A00/search?map_index=-1"


def test_a_trial_of_a_journal_study_with_its_steps_failure_and_the_searchs_mlflow_run(tmp_path):
    url = f"journal://{tmp_path / 'search.journal'}"
    study = optuna.create_study(study_name="dag/search/run-1", storage=open_storage(url), direction="maximize")
    study.set_user_attr(PARENT_URL_ATTR, "http://mlflow/#/experiments/1/runs/abc")
    trial = study.ask({"lr": optuna.distributions.FloatDistribution(0.01, 1.0)})
    trial.set_user_attr("job_name", "aml-job-0")
    for step in range(1, 1201):
        trial.report(step / 1200, step)
    trial.set_user_attr("failure", HOSTILE)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    task = SimpleNamespace(task_type="HyperparameterSearchOperator", storage_url=url)
    found = one_trial(task, "dag", "search", "run-1", -1, 0)
    assert found["state"] == "FAIL" and found["job_name"] == "aml-job-0" and found["failure"] == HOSTILE
    assert found["search_mlflow_url"] == "http://mlflow/#/experiments/1/runs/abc"
    assert 400 <= len(found["steps"]) <= 501 and found["steps"][0] == [1, 1 / 1200] and found["steps"][-1] == [1200, 1.0]
    assert one_trial(task, "dag", "search", "run-1", -1, 7) == {"note": "its study has no trial 7"}
    assert one_trial(task, "dag", "search", "run-2", -1, 0) == {"note": "the search has not created its study yet"}
    assert one_trial(SimpleNamespace(task_type="X"), "dag", "search", "run-1", -1, 0) is None


def test_the_page_escapes_the_study_and_the_job_and_links_back():
    data = {"ti": TI, "number": 3, "best": True, "targets": {},
            "objective": {"objective_metric": HOSTILE, "direction": "maximize"},
            "trial": {"number": 3, "state": "RUNNING", "value": None, "params": {HOSTILE: HOSTILE},
                      "job_name": HOSTILE, "steps": [[1, 0.5], [2, 0.6]]},
            "view": {"job": HOSTILE, "backend": "local", "state": "RUNNING", "tail": [["0", HOSTILE]],
                     "metrics": {HOSTILE: {"series": [[1, 0.1], [2, 0.2]], "last": 0.2, "best": 0.2}}},
            "links": [("MLflow (trial 3)", "http://mlflow/#/experiments/1/runs/child")], "tensorboard": None}
    html = trial_page(data)
    assert HOSTILE not in html and "&lt;script&gt;" in html
    assert "trial 3 RUNNING, job RUNNING" in html and "(the best trial)" in html
    named = escape(HOSTILE) + " (maximize)"  # the objective's metric, as the search recorded it
    assert f"{named}, as reported to the study" in html
    scored = {**data, "trial": {**data["trial"], "value": 0.75}}
    assert f"<tr><th>{named}</th><td>0.75</td></tr>" in trial_page(scored)
    assert "<tr><th>objective</th><td>0.75</td></tr>" in trial_page({**scored, "objective": {}})  # none recorded
    assert "<meta http-equiv='refresh'" in html  # a running trial's page reloads itself
    back = re.search(r"<a href='([^']+)'>All trials", html)[1]
    here = "http://airflow/ml-training/trial/d%20%3Cb%3E/manual__2026-01-01T00%3A00%3A00%2B00%3A00/search/3?map_index=-1"
    assert urljoin(here, back) == BASE
    assert "href='http://mlflow/#/experiments/1/runs/child'" in html
    done = trial_page({**data, "trial": {**data["trial"], "state": "COMPLETE"}, "view": {}, "view_note": "none saved"})
    assert "<meta http-equiv='refresh'" not in done and "none saved" in done


def test_the_search_view_links_every_trial_row_and_point_to_its_page():
    result = {"best_trial": 1, "trials": [
        {"number": n, "state": "COMPLETE", "value": v, "params": {"lr": lr}, "job_name": f"job-{n}"}
        for n, v, lr in ((0, 0.5, 0.1), (1, 0.9, 0.2), (2, 0.7, 0.3))]}
    html = page({"ti": {**TI, "state": "success"}, "view": {}, "result": result, "search": result, "targets": {}, "links": []})
    rows = re.findall(r"<td><a href='([^']+)'>(\d+)</a>", html)
    assert [number for _, number in rows] == ["0", "1", "2"]
    points = re.findall(r'<a href="([^"]+)"><circle[^>]*class="(best|point)"', html)
    assert len(points) == 6 and sum(kind == "best" for _, kind in points) == 2  # two plots, best marked in each
    for href, number in rows:
        assert urljoin(BASE, href.replace("&amp;", "&")) == (
            f"http://airflow/ml-training/trial/d%20%3Cb%3E/manual__2026-01-01T00%3A00%3A00%2B00%3A00/search/{number}"
            "?map_index=-1")
    assert {href for href, _ in points} == {href for href, _ in rows}
