"""Clear means retrain (issue 25 D3), with real local jobs and dag.test(): re-running a DAG run whose
training job succeeded starts a fresh job that trains from scratch in new directories (the earlier model
stays); a new try after a failed job resumes from that job's checkpoint."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from dag_runs import load_dag, run

from support import TEST_DAGS

pytestmark = pytest.mark.integration

DATE = datetime(2026, 2, 1, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def dag(airflow_db):
    return load_dag(TEST_DAGS / "ml_retrain_test_dags.py", "retrain_dag")


def test_a_failed_attempt_resumes_and_a_succeeded_one_retrains(dag):
    failed = run(dag, {"fail_at_round_5": True}, DATE)
    assert failed.states[("train", -1)] == "failed"

    resumed = run(dag, {"fail_at_round_5": False}, DATE)  # the same DAG run, its task run again
    assert resumed.state == "success", resumed.states
    first = resumed.value("train")
    assert first["metrics"]["first_round"] == 6, "the failed job's checkpoint (round 5) was resumed from"
    assert "/retrain-" not in first["model_path"]

    retrained = run(dag, {"fail_at_round_5": False}, DATE)
    second = retrained.value("train")
    assert second["job_name"] == first["job_name"]
    assert second["metrics"]["first_round"] == 1, "a succeeded job is not resumed: the new try trains from scratch"
    assert second["model_path"] == first["model_path"].replace("/model/", "/retrain-1/model/")
    assert Path(first["model_path"]).read_text() == "trained rounds 6..10", "the earlier model is kept"
    assert Path(second["model_path"]).read_text() == "trained rounds 1..10"

    third = run(dag, {"fail_at_round_5": False}, DATE).value("train")
    assert (third["metrics"]["first_round"], "/retrain-2/model/" in third["model_path"]) == (1, True)
