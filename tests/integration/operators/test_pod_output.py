"""A pod's output is bounded and typed before it reaches any store (issue 19, M2 and M3): real jobs on
the local backend, run through the training operators with dag.test(), printing hostile or huge output."""

from __future__ import annotations

import json
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
