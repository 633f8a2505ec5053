"""Both training operators inside real DAG runs (dag.test()) on the local backend."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.drivers import replay
from support import needs_horovod

pytestmark = pytest.mark.integration


def _backend() -> LocalBackend:
    return LocalBackend(Path(os.environ["AIRFLOW_HOME"]) / "ml")


def _events(job_name: str, event: str) -> list[tuple[str, dict]]:
    """(source, fields) of every structured line of one kind in the job's whole log."""
    found = []
    for line in (_backend().job_dir(job_name) / "output.log").read_text().splitlines():
        source, _, text = line.partition("] ")
        if text.startswith("{") and json.loads(text).get("event") == event:
            found.append((source.lstrip("["), json.loads(text)))
    return found


@needs_horovod
def test_horovod_and_lightgbm_train_in_one_dag_run(run_dag, capfd):
    result = run_dag("ml_test_horovod_and_lightgbm")
    assert result.state == "success", result.task_states

    horovod = result.xcom["horovod"]
    assert horovod["state"] == "SUCCEEDED" and horovod["backend"] == "local"
    assert Path(horovod["model_path"]).exists(), horovod
    checksums = {fields["rank"]: fields["checksum"] for _, fields in _events(horovod["job_name"], "weights_checksum")}
    assert set(checksums) == {0, 1} and checksums[0] == checksums[1], "ranks ended with different weights"
    metrics = replay(_backend().log_source(horovod["job_name"])).tracker
    losses = [step["loss"] for step in metrics.history()]
    assert len(losses) == 3 and losses[-1] < losses[0], losses
    assert horovod["metrics"]["accuracy"] > 0.8, horovod["metrics"]

    lightgbm = result.xcom["lightgbm"]
    assert lightgbm["state"] == "SUCCEEDED"
    assert Path(lightgbm["model_path"]).exists(), lightgbm
    assert lightgbm["metrics"]["auc"] > 0.9, lightgbm["metrics"]

    task_log = capfd.readouterr().out
    assert "[rank 0]" in task_log and "[rank 1]" in task_log, "rank-prefixed worker lines missing from the task log"


def test_failed_job_names_exit_codes_and_last_lines_and_deferred_job_succeeds(run_dag, capfd):
    result = run_dag("ml_test_generic")
    assert result.task_states["fails"] == "failed"
    assert result.task_states["deferred"] == "success"

    task_log = capfd.readouterr().out
    assert "rank 1 exited with code 3" in task_log
    assert "rank 1: 3" in task_log  # the exit code table
    assert "[rank 1] working 1" in task_log  # the last lines of the job, in the failure message

    deferred = result.xcom["deferred"]
    assert deferred["metrics"] == {"loss": pytest.approx(1 / 3), "accuracy": 0.9}
    streamed = [line for line in task_log.splitlines() if "[rank 0] step " in line]  # compact metric lines
    assert len(streamed) == 3, "the trigger must stream each of rank 0's lines exactly once"
    assert "[rank 0] step 3  loss=0.3333" in task_log
