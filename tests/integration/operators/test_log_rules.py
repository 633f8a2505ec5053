"""Log rules on the training operators: a fail_on line fails the task without retry, a retry_on line
fails only the try; either way the job is cancelled at once (sync wait and deferred alike)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend

pytestmark = pytest.mark.integration


def _try_numbers(dag_id: str, run_id: str) -> dict[str, int]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        return {ti.task_id: ti.try_number for ti in session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=run_id)}


def test_fail_on_fails_for_good_and_retry_on_spends_a_retry(run_dag, capfd):
    result = run_dag("ml_test_log_rules")
    assert result.task_states == {"oom_sync": "failed", "oom_deferred": "failed", "flaky": "failed"}
    tries = _try_numbers("ml_test_log_rules", result.run_id)
    assert tries["oom_sync"] == 1 and tries["oom_deferred"] == 1, "fail_on must not spend the retries (retries=2)"
    assert tries["flaky"] == 2, "retry_on fails the try, and the retry runs"

    log = capfd.readouterr().out
    assert "its log matched fail_on 'CUDA out of memory': [rank 0] RuntimeError: CUDA out of memory" in log
    assert "its log matched retry_on 'Connection reset by peer'" in log
    backend = LocalBackend(Path(os.environ["AIRFLOW_HOME"]) / "ml")
    for job in backend.root.glob("jobs/aml-oom-*/job.json"):
        assert backend.status(job.parent.name).state.value == "CANCELLED", "the sleeping job was not stopped"
