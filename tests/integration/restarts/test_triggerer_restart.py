"""A real triggerer process killed (SIGKILL) and started again while it streams a deferred job's log:
no line is lost or shown twice unlabelled (the batch the killed triggerer was showing may show again,
labelled "(again)"), and the metrics and the last checkpoint come through intact."""

from __future__ import annotations

import json
import re
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest
from airflow_stack import AirflowStack, ApiError

pytestmark = pytest.mark.integration

LINES = 60
HOLD_AT = 30  # the job waits here until the test has killed the triggerer: under load it could end first
_JOB = textwrap.dedent(f"""
    import json, os, sys, time
    root, release = os.environ["AIRFLOW_ML_CHECKPOINT_DIR"], sys.argv[1]
    for i in range({LINES}):
        while i == {HOLD_AT} and not os.path.exists(release):
            time.sleep(0.2)
        print("line", i, flush=True)
        if i % 10 == 9:
            print(json.dumps({{"event": "metrics", "step": i + 1, "loss": 1 / (i + 1)}}), flush=True)
            print(json.dumps({{"event": "checkpoint", "step": i + 1, "path": f"{{root}}/ckpt-{{i + 1}}"}}), flush=True)
        time.sleep(0.5)
""")
_DAG = """
    from airflow.sdk import DAG
    from airflow_ml_provider.operators.training import TrainingJobOperator

    with DAG("ml_test_triggerer_restart", schedule=None, catchup=False):
        TrainingJobOperator(task_id="train", command=["python", "-c", {job!r}, {release!r}], num_workers=1,
                            deferrable=True, follow={{"poll_interval": 0.5}})
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    home, dags = tmp_path_factory.mktemp("airflow"), tmp_path_factory.mktemp("dags")
    release_file(home).parent.mkdir(parents=True)  # shown to the job only if it exists when the job starts
    (dags / "restart_dag.py").write_text(textwrap.dedent(_DAG.format(job=_JOB, release=str(release_file(home)))))
    extra = {"backend": "local", "local_root": str(home / "ml"), "local_image": sys.prefix}
    env = {"AIRFLOW_CONN_ML_TRAINING_DEFAULT": json.dumps({"conn_type": "ml_training", "extra": extra})}
    with AirflowStack(home, dags, env=env) as running:
        running.wait_for_dag("ml_test_triggerer_restart")
        yield running


def release_file(home: Path) -> Path:
    """Created by the test once the triggerer is killed; under ``<local_root>/data``, which every job's
    sandbox shows (``$AIRFLOW_HOME`` itself is hidden from jobs)."""
    return home / "ml" / "data" / "release"


def streamed(stack: AirflowStack, run_id: str, again: bool = False) -> list[int]:
    """The job's line numbers in the task log: those shown once, or (``again``) those labelled as shown again."""
    try:
        entries = stack.task_log("ml_test_triggerer_restart", run_id, "train")
    except ApiError as exc:  # the run's task instance is not created yet
        if exc.status != 404:
            raise
        return []
    pattern = (r"^\(again\) " if again else r"^") + r"\[rank 0\] line (\d+)$"
    return [int(m[1]) for entry in entries if (m := re.search(pattern, str(entry.get("event"))))]


def test_a_killed_triggerer_loses_no_line_and_repeats_none_unlabelled(stack):
    run_id = stack.trigger_dag("ml_test_triggerer_restart")
    deadline = time.monotonic() + 240
    while len(streamed(stack, run_id)) < 12:  # deferred, and well into the job
        assert time.monotonic() < deadline, stack.log_tails()
        time.sleep(1)
    [train] = stack.task_instances("ml_test_triggerer_restart", run_id)
    assert train["state"] == "deferred", "the job holds at line 30, so its trigger is still streaming"
    stack.restart("triggerer", sig=signal.SIGKILL)  # a crash: nothing is flushed or handed over
    release_file(stack.home).touch()
    assert stack.wait_for_run("ml_test_triggerer_restart", run_id, timeout=300) == "success", stack.log_tails()

    deadline = time.monotonic() + 120  # the new triggerer's part of the task log can be written after the run ends
    while LINES - 1 not in streamed(stack, run_id) + streamed(stack, run_id, again=True):
        assert time.monotonic() < deadline, "the job's last line never reached the task log"
        time.sleep(1)
    lines, again = streamed(stack, run_id), streamed(stack, run_id, again=True)
    assert lines == sorted(set(lines)), "no line shown twice unlabelled, none out of order"
    assert sorted(set(lines) | set(again)) == list(range(LINES)), "no line lost across the restart"
    assert not again or again == list(range(again[0], again[0] + len(again))), "one batch shown again, in order"
    entries = " ".join(str(e.get("event")) for e in stack.task_log("ml_test_triggerer_restart", run_id, "train"))
    assert "Continuing after the last log line shown before a restart" in entries
    result = stack.xcom("ml_test_triggerer_restart", run_id, "train")
    assert result["state"] == "SUCCEEDED" and result["metrics"]["loss"] == pytest.approx(1 / LINES)
    state = stack.xcom("ml_test_triggerer_restart", run_id, "train", key="ml_follow_state")
    assert state["metrics"]["checkpoint"]["path"].endswith(f"/ckpt-{LINES}")
    assert [step for step, _ in state["metrics"]["metrics"]["loss"]["series"]] == list(range(10, LINES + 1, 10))
