"""A deferred training task's first deferral logs no error (issue 40): the trigger reads its saved log position
when it starts (for a restart), and on a first deferral there was none, which the Task SDK logged as
``[error] XCom not found ... key='ml_follow_state'``. The task saves the position it defers with first.

The DAG runs in a process of its own, whose whole output the test reads: in a pytest worker, Airflow's
logging may still write to a stream an earlier test's capture left behind."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from dag_runs import record

from support import TEST_DAGS

pytestmark = pytest.mark.integration

_RUN = """
import runpy, sys
dag = runpy.run_path(sys.argv[1])["metrics_deferred_dag"]
print("RUN_ID", dag.test().run_id, flush=True)
"""


def test_a_first_deferral_logs_no_missing_xcom(airflow_db):
    done = subprocess.run([sys.executable, "-c", _RUN, str(TEST_DAGS / "ml_metrics_test_dags.py")],
                          capture_output=True, text=True, timeout=600, env=os.environ)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    run_id = next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("RUN_ID "))
    result = record("ml_metrics_test_deferred", run_id, "")
    assert set(result.states.values()) == {"success"}, result.states
    assert "running trigger in line" in log, "precondition: the task deferred and its trigger ran"
    assert "XCom not found" not in log
    assert result.value("train", "ml_follow_state")["seq"] > 0, "the trigger saved its position over the task's"
