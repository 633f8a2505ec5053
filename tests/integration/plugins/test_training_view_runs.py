"""The training view of real runs (dag.test(), local jobs, the metadata database the API server would read):
the curves come from what the follow core saved (the view's XCom while the task follows the job, the follow
core's durable state while it is deferred) and from the job's TensorBoard event files, a hostile metric name or
TensorBoard tag is text, a search's trials are listed with the best marked, and each trial's page shows its job as
the search followed it (on a worker and in the triggerer)."""

from __future__ import annotations

from html import escape
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from airflow_ml_provider.plugins.training_view import page
from airflow_ml_provider.plugins.trial_view import trial_page
from airflow_ml_provider.plugins.view_app import read, read_trial

pytestmark = pytest.mark.integration
HOSTILE_TAG = "<img src=x onerror=alert(1)>"  # the tag tests/dags/ml_view_test_dags.py's job reports


@pytest.fixture(scope="module")
def viewed(airflow_db, test_dag):
    dag_run = test_dag("ml_view_test").test()
    return dag_run.run_id


def test_a_followed_jobs_view_has_its_curves_and_its_progress_done(viewed):
    data = read("ml_view_test", viewed, "lightgbm")
    view = data["view"]
    assert data["ti"]["state"] == "success" and view["state"] == "SUCCEEDED"
    assert view["plan"] == {"unit": "round", "total": 30}
    assert [point[0] for point in view["metrics"]["auc"]["series"]][-1] == 30
    html = page(data)
    assert "30 of 30 rounds" in html and "<svg" in html and "Job is SUCCEEDED" in html


def test_a_trainers_tensorboard_scalars_are_in_its_directory_and_in_the_view(viewed):
    """The LightGBM job (2 workers) wrote rank 0's points into AIRFLOW_ML_TENSORBOARD_DIR, under its checkpoint
    directory; tensorboard's reader finds the metric lines' tags at their steps, and the view draws them."""
    data = read("ml_view_test", viewed, "lightgbm")
    logdir = Path(data["view"]["tensorboard_dir"])
    assert logdir == Path(data["result"]["tensorboard_dir"]) and logdir.parent.name == "checkpoints", logdir
    assert len(list(logdir.glob("*tfevents*"))) == 1, "not one writer (rank 0's)"
    accumulator = EventAccumulator(str(logdir))
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    lines = data["view"]["metrics"]
    assert {"loss", "auc"} <= tags and tags <= set(lines) | {"loss"}, (tags, set(lines))
    steps = [event.step for event in accumulator.Scalars("auc")]
    assert steps == [point[0] for point in lines["auc"]["series"]] and steps[-1] == 30, steps
    assert data["tensorboard"]["runs"]["."]["auc"][-1][0] == 30, data["tensorboard"]
    html = page(data)
    assert f"tensorboard --logdir {logdir}" in html and "auc (TensorBoard)" in html


def test_a_deferred_task_records_its_jobs_tensorboard_directory_as_it_defers(viewed):
    """The view of a job followed in the triggerer finds the job's TensorBoard directory (while it runs, its
    result is not there yet) in the XCom the task saved before deferring."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalar(select(XComModel).where(XComModel.dag_id == "ml_view_test", XComModel.run_id == viewed,
                                                     XComModel.task_id == "deferred",
                                                     XComModel.key == "ml_tensorboard_dir"))
        saved = XComModel.deserialize_value(row) if row is not None else None
    data = read("ml_view_test", viewed, "deferred")
    assert saved and saved.endswith("/checkpoints/tensorboard") and data["tensorboard"]["dir"] == saved, saved
    assert data["tensorboard"]["note"] == "no event files yet"  # its command writes none


def test_a_hostile_tensorboard_tag_shows_as_text(viewed):
    data = read("ml_view_test", viewed, "tensorboard_tags")
    assert data["tensorboard"]["runs"]["."][HOSTILE_TAG] == [[1, 2.0], [2, 4.0]], data["tensorboard"]
    html = page(data)
    assert escape(HOSTILE_TAG) + " (TensorBoard)" in html and HOSTILE_TAG not in html


def test_a_deferred_jobs_view_comes_from_the_follow_state_and_escapes_a_hostile_line(viewed):
    data = read("ml_view_test", viewed, "deferred")
    assert [point[0] for point in data["view"]["metrics"]["loss"]["series"]] == [1, 2, 3], data["view"]
    html = page(data)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>" not in html
    workers = data["view"]["resources"]["workers"]  # the launcher's sample, kept in the trigger's durable state
    assert workers["0"]["cpu"] > 10 and workers["0"]["mem_mib"] > 1, workers
    assert "<h2>Resources at " in html and "<tr><td>rank 0</td>" in html


def test_a_search_view_lists_the_trials_with_the_best_marked(run_dag):
    result = run_dag("ml_test_search")
    data = read("ml_test_search", result.run_id, "search")
    best = data["result"]["best_trial"]
    html = page(data)
    assert f">{best}</a> (best)</td>" in html and html.count("<tr class='best'>") == 1
    # named by the objective the search recorded (the default auc, maximized: in no setting of its serialized task)
    assert "auc per trial (maximize)" in html and "auc against learning_rate" in html


def test_each_trial_of_a_search_has_its_page_with_its_job_and_its_mlflow_run(run_dag, monkeypatch):
    """The search (LightGBM trials on the local backend, followed on the worker) saved each trial's job view as it
    followed it (its XCom ml_trial_view_<n>); the trial's page shows it with the study's objective per step and the
    link to the trial's MLflow child run, recorded in the summary (no MLflow call at page time)."""
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__MLFLOW_UI_URL", "http://mlflow.example:5000")
    result = run_dag("ml_test_search")
    summary = result.xcom["search"]
    for row in summary["trials"]:
        data = read_trial("ml_test_search", result.run_id, "search", -1, row["number"])
        view = data["view"]
        assert view["job"] == row["job_name"] and view["state"] == "SUCCEEDED", view
        assert [point[0] for point in view["metrics"]["auc"]["series"]][-1] == 15 and view["tail"], view
        assert [step for step, _ in data["trial"]["steps"]] == list(range(1, 16)), data["trial"]
        assert row["mlflow_url"].startswith("http://mlflow.example:5000/#/experiments/") and row["mlflow_run_id"]
        assert data["links"] == [(f"MLflow (trial {row['number']})", row["mlflow_url"])]
        assert data["tensorboard"]["runs"]["."]["auc"][-1][0] == 15, data["tensorboard"]
        html = trial_page(data)
        assert f"trial {row['number']} COMPLETE, job SUCCEEDED" in html and "Objective per step" in html
        assert f"<tr><th>auc (maximize)</th><td>{row['value']}</td></tr>" in html
        assert "auc (maximize), as reported to the study" in html
        assert ("(the best trial)" in html) == (row["number"] == summary["best_trial"])
    assert read_trial("ml_test_search", result.run_id, "search", -1, 99)["view"] == {}
    assert read_trial("ml_test_search", result.run_id, "search_data", -1, 0) is None  # no search


def test_a_deferred_searchs_trials_keep_their_job_views_from_the_triggerer(run_dag):
    """The trigger saved each trial's job view (its last lines, its timeline) as the search task's XCom."""
    result = run_dag("ml_test_search_deferred")
    assert result.state == "success", result
    for row in result.xcom["search"]["trials"]:
        data = read_trial("ml_test_search_deferred", result.run_id, "search", -1, row["number"])
        assert data["view"]["job"] == row["job_name"] and data["view"]["state"] == "SUCCEEDED", data["view"]
        assert ["rank 0", f'{{"event": "result", "score": {row["value"]}}}'] in data["view"]["tail"], data["view"]
        assert [what for _, what in data["view"]["timeline"]][-1] == "Job is SUCCEEDED" and data["links"] == []
        assert data["trial"]["value"] == row["value"] and data["trial"]["steps"] == []  # its one result: no steps
