"""`make demo`'s quiet mode, as a user sees it: a process runs a short real job with dag.test() through
scripts/demo_progress.py; its terminal output is only progress (each task's start and end with
[done/total], the job's live metric lines), and Airflow's own logging is in the log file."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support import REPO, TEST_DAGS

pytestmark = pytest.mark.integration

SCRIPT = f"""
import runpy, sys
from pathlib import Path
sys.path[:0] = [{str(REPO / "scripts")!r}, {str(REPO / "tests")!r}]
import support
from demo_progress import run_quietly, terminal
say = terminal()
dag = runpy.run_path({str(TEST_DAGS / "ml_metrics_test_dags.py")!r})["metrics_dag"]
say("state " + str(run_quietly(dag, Path(sys.argv[1]), say).state))
"""


def test_progress_on_the_terminal_and_airflow_logging_in_the_file(airflow_db, tmp_path):
    log = tmp_path / "airflow.log"
    shown = subprocess.run([sys.executable, "-c", SCRIPT, str(log)], capture_output=True, text=True, timeout=500)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert shown.stderr == ""
    # "  ... train running (N s so far)" lines appear only when the job is slow to start
    lines = [line for line in shown.stdout.splitlines() if not line.startswith("  ... ")]
    assert lines[0] == "  > train" and lines[-2].startswith("  [1/1] train: ok in ") and lines[-1] == "state success"
    every = {f"      rank 0: step {step}  loss={loss}" for step, loss in ((10, "1.0000"), (20, "0.5000"),
                                                                         (30, "0.3333"))}
    # metric lines at most one a second (those read together are thinned), the last one always
    assert set(lines[1:-3]) <= every and lines[-3] == "      rank 0: step 40  loss=0.2500"
    logged = log.read_text()
    assert "[DAG TEST] starting task_id=train" in logged and "Task instance state updated" in logged
