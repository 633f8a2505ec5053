"""A deferred training task's first deferral logs no error (issue 40): the trigger reads its saved log position
when it starts (for a restart), and on a first deferral there was none, which the Task SDK logged as
``[error] XCom not found ... key='ml_follow_state'``. The task saves the position it defers with first."""

from __future__ import annotations

import pytest
from dag_runs import load_dag, run

from support import TEST_DAGS

pytestmark = pytest.mark.integration


def test_a_first_deferral_logs_no_missing_xcom(airflow_db, capfd):
    result = run(load_dag(TEST_DAGS / "ml_metrics_test_dags.py", "metrics_deferred_dag"))
    out = capfd.readouterr()
    assert result.state == "success", result.states
    log = out.out + out.err
    assert "running trigger in line" in log, "precondition: the task deferred and its trigger ran"
    assert "XCom not found" not in log
    assert result.value("train", "ml_follow_state")["seq"] > 0, "the trigger saved its position over the task's"
