"""Issue 45 D6, through the REST API of a real deployment (what the UI's "Mark as success" sends): marking a
running training task success cancelled its job, but the task's log ended "Task failed with exception ... job
CANCELLED" and ``evaluate`` then failed "returned no training result". Now the log says what happened and
``evaluate`` is skipped, saying why."""

from __future__ import annotations

import json
import urllib.parse

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

DAG_ID = "ml_training_pipeline"
LONG = {"boost_rounds": 10000, "learning_rate": 0.01, "workers": 1, "shards": 1}  # minutes of rounds


def _log(stack, run_id: str, task_id: str) -> str:
    return "\n".join(json.dumps(entry) for entry in stack.task_log(DAG_ID, run_id, task_id))


def test_marking_a_running_training_task_success_cancels_its_job_and_says_so(stack):
    stack.wait_for_dag(DAG_ID)
    run_id = stack.trigger_dag(DAG_ID, LONG)

    def training() -> bool:
        states = {t["task_id"]: t["state"] for t in stack.task_instances(DAG_ID, run_id)}
        return states.get("train_lightgbm") == "running" and '"event": "[rank 0] step' in _log(stack, run_id,
                                                                                            "train_lightgbm")

    stack.wait(training, 900, "train_lightgbm running, its job's rounds in its log")
    path = f"/dags/{DAG_ID}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances/train_lightgbm"
    stack.api("PATCH", path, {"new_state": "success"})
    stack.wait_for_run(DAG_ID, run_id, timeout=600)
    states = {t["task_id"]: t["state"] for t in stack.task_instances(DAG_ID, run_id)}
    assert (states["train_lightgbm"], states["evaluate"]) == ("success", "skipped"), states
    assert (states["gate"], states["deploy"]) == ("skipped", "skipped"), states
    def last_words() -> str | None:
        log = _log(stack, run_id, "train_lightgbm")
        return log if "keeps the state" in log else None

    trained = stack.wait(last_words, 120, "train_lightgbm's last words")
    assert "stopped from outside while job" in trained and "cancelling the job" in trained, trained[-3000:]
    assert "Task failed with exception" not in trained and "Traceback" not in trained, trained[-3000:]
    ours = [line for line in trained.splitlines() if '"logger": "airflow.task.operators.' in line]
    assert "the task keeps the state it was given" in ours[-1], ours[-3:]  # the task's last words
    evaluated = _log(stack, run_id, "evaluate")
    assert "nothing to evaluate: task 'train_lightgbm' left no training result" in evaluated, evaluated[-3000:]
