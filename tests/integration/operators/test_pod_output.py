"""A pod's output is bounded and typed before it reaches any store (issue 19, M2 and M3): real jobs on
the local backend, run through the training operators with dag.test(), printing hostile or huge output."""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import pytest
from dag_runs import load_dag, run

from support import TEST_DAGS

pytestmark = pytest.mark.integration

DAGS = TEST_DAGS / "ml_pod_output_test_dags.py"
BOUND = 1 << 20  # the stated bound of the saved follower state and of the XCom row: 1 MiB


def test_hostile_metrics_lines_are_ignored_with_warnings_and_never_reach_mlflow(airflow_db, capfd):
    """A line nested 2,000 deep, steps -1 and 10**30, names MLflow refuses: both tries of the task
    crashed (RecursionError), and evaluation's MLflow log_metrics broke on the step."""
    from mlflow import MlflowClient

    from airflow_ml_provider.hooks.model_registry import ModelRegistryHook

    result = run(load_dag(DAGS, "hostile_metrics"))
    assert result.states == {("train", -1): "success", ("train_deferred", -1): "success",
                             ("evaluate", -1): "success"}
    for task in ("train", "train_deferred"):
        assert result.value(task)["metrics"] == {"loss": pytest.approx(1 / 3), "auc": 0.8}
    log = capfd.readouterr().out
    for warning in ("a JSON line nested deeper than 8 levels", "step -1 is not an integer 0 <= step < 2**63",
                    f"step {10**30} is not an integer 0 <= step < 2**63", "metric name '../../x' does not match",
                    "metric name 'a b' does not match", "result name 'bad name' does not match"):
        assert f"ignored part of a log line of [rank 0]: {warning}" in log, warning

    client = MlflowClient(ModelRegistryHook().settings().tracking_uri)
    run_id = result.value("evaluate")["mlflow_run_id"]
    history = {name: [(m.step, m.value) for m in client.get_metric_history(run_id, name)]
               for name in ("train_loss", "train_auc")}
    assert history == {"train_loss": [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3))],
                       "train_auc": [(1, 0.6), (2, 0.7), (3, 0.8)]}


def _row_size(dag_id: str, run_id: str, key: str) -> int:
    """Bytes of one XCom row's stored value (what the metadata database holds)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.query(XComModel).filter_by(dag_id=dag_id, run_id=run_id, task_id="chatty", key=key).one()
        return len(json.dumps(row.value))


def test_metric_history_keeps_the_follower_state_and_the_xcom_row_under_1_mib(airflow_db):
    """2,000 lines x 50 names gave a 21.7 MB XCom row and a 34.5 MB follower state saved with every batch."""
    result = run(load_dag(DAGS, "metric_volume"))
    assert result.state == "success", result.states
    xcom_row = _row_size("ml_test_metric_volume", result.run_id, "return_value")
    state_row = _row_size("ml_test_metric_volume", result.run_id, "ml_follow_state")
    print(f"\n2,000 lines x 50 metric names: XCom return_value {xcom_row} bytes, saved follower state "
          f"{state_row} bytes (bound {BOUND})")
    assert xcom_row < BOUND and state_row < BOUND

    # What users rely on stays exact: the last and best value of every metric kept, the model path.
    rand, fixed = random.Random(0), [f"{'a' * 120}_{j:03d}" for j in range(25)]
    seen: dict[str, list[float]] = {name: [] for name in fixed}
    for i in range(2000):
        for name in fixed:
            seen[name].append(rand.random())
        for _ in range(25):
            rand.random()
    metrics = result.value("chatty")["metrics"]
    assert {name: metrics[name] for name in fixed} == {name: values[-1] for name, values in seen.items()}
    assert len(metrics) == 256 + 64  # 256 metric names, 64 result values
    state = result.value("chatty", "ml_follow_state")
    tracked = state["metrics"]["metrics"]
    assert {name: tracked[name]["best"] for name in fixed} == {name: max(values) for name, values in seen.items()}
    assert all(tracked[name]["series"][0][0] == 2**63 - 2001 for name in fixed)  # the curve from its start
    assert result.value("chatty")["model_path"].endswith("/model.txt")


def test_a_symlinked_model_path_pointing_outside_is_never_sent_to_evaluation(airflow_db, capfd):
    """Issue 18: the job's own model directory holds model.txt -> /etc/passwd, reported as its model."""
    result = run(load_dag(DAGS, "symlink_model"))
    assert result.state == "success", result.states
    trained = result.value("train")
    job_dir = trained["model_path"]  # the task's own model directory, not the reported symlink
    assert Path(job_dir).name == "model" and Path(job_dir, "model.txt").is_symlink()
    log = capfd.readouterr().out
    reported = str(Path(job_dir, "model.txt"))
    assert (f"ignored model path {reported!r} reported by [rank 0]: it is outside the job's artifact directories"
            in log)
    assert re.findall(r"evaluating model (\S+)", log) == [job_dir]  # what the evaluation job was given
    assert result.value("evaluate")["model_path"] == job_dir


def test_terminal_escapes_of_a_job_reach_the_task_log_xcom_and_mlflow_as_visible_text(airflow_db, capfd):
    """Issue 38: an OSC 52 clipboard write and a screen clear from a job's lines reached the task log raw (and
    its result line's JSON escapes decoded to them in XCom and MLflow); now each control character is its
    ``\\xNN`` text, in the synchronous and the deferred task alike."""
    from mlflow import MlflowClient

    from airflow_ml_provider.hooks.model_registry import ModelRegistryHook

    result = run(load_dag(DAGS, "terminal_escapes"))
    assert result.state == "success", result.states
    log = capfd.readouterr().out
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", log), "a control character reached the task log"
    for task in ("train", "train_deferred"):
        assert result.value(task)["metrics"] == {"note": r"\x1b]52;c;ZWNobyBwd25lZA==\x07", "auc": 0.9}
    assert log.count(r"[rank 0] copy \x1b]52;c;ZWNobyBwd25lZA==\x07 done") == 2
    assert log.count(r"[rank 0] \x1b[2J\x1b[31mcleared") == 2
    recorded = MlflowClient(ModelRegistryHook().settings().tracking_uri).get_run(result.value("evaluate")["mlflow_run_id"])
    assert recorded.data.tags["airflow.model_sha256"] == r"\x1b]52;c;ZWNobyBwd25lZA==\x07"


def test_a_job_printing_past_the_task_log_cap_shows_its_first_lines_and_where_the_rest_is(airflow_db, capfd,
                                                                                          monkeypatch):
    """Issue 38: 2,000 metric lines made a 13.5 MB task log. With ``[ml_training] task_log_max_lines`` at 50, a
    job's 301 lines show 50 in the task log, then one line naming its full log (output.log, which keeps every
    line), while the metrics still see all of them; the deferred task's trigger keeps the count."""
    from airflow_ml_provider.jobs.backends.local.backend import LocalBackend

    monkeypatch.setenv("AIRFLOW__ML_TRAINING__TASK_LOG_MAX_LINES", "50")
    result = run(load_dag(DAGS, "task_log_cap"))
    assert result.state == "success", result.states
    log = capfd.readouterr().out
    backend = LocalBackend(Path(os.environ["AIRFLOW_HOME"]) / "ml")
    for task in ("train", "train_deferred"):
        trained = result.value(task)
        assert trained["metrics"] == {"loss": pytest.approx(1 / 300), "auc": 0.9}, "metrics read every line"
        full = backend.job_dir(trained["job_name"]) / "output.log"
        assert len(full.read_text().splitlines()) >= 301
        assert log.count(f"The task log shows the first 50 lines of the job's log (task_log_lines); the rest are "
                         f"in {full}. Metrics and log rules still read every line") == 1
    shown = re.findall(r"\[rank 0\] step (\d+)  loss=", log)
    assert shown == [str(step) for step in range(1, 51)] * 2, "each task shows its job's first 50 lines"
