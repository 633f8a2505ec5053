"""Human approval before champion moves, with Airflow's own HITL: without require_approval the run does
not wait; with it, the approval task parks in awaiting_input with its request recorded, and an answer
through the REST API the UI uses (PATCH .../hitlDetails, as a signed-in user) resumes it."""

from __future__ import annotations

import threading

import pytest
from dag_runs import load_dag, record, run
from support import TEST_DAGS, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def approval_dag(airflow_db):
    return load_dag(TEST_DAGS / "ml_approval_test_dags.py", "approval_dag")


def test_no_approval_required_does_not_wait(approval_dag):
    result = run(approval_dag, {"require_approval": False})
    assert result.state == "success"
    assert result.value("deploy") == {"required": False, "approved": None, "by": None, "at": None,
                                      "reason": "approval not required"}


@pytest.fixture
def api(monkeypatch):
    """The core REST API in this process, every request signed in as an admin (SimpleAuthManager)."""
    from fastapi.testclient import TestClient

    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "True")
    from airflow.api_fastapi.app import create_app

    with TestClient(create_app("core")) as client:
        yield client


def _awaiting(run_id: str):
    from airflow.models.hitl import HITLDetail
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id="ml_approval_test", run_id=run_id, task_id="approve").one()
        if str(ti.state) != "awaiting_input":
            return None
        detail = session.query(HITLDetail).filter_by(ti_id=ti.id).one()
        return {"subject": detail.subject, "body": detail.body, "options": detail.options}


def test_a_reviewer_rejects_through_the_hitl_api(approval_dag, api):
    """dag.test() runs the DAG in this (main) thread; a reviewer thread answers once the request exists."""
    seen = {}

    def reviewer():
        run_id = wait_for(_running_approval_run, what="the approval run")
        seen["request"] = wait_for(lambda: _awaiting(run_id), timeout=300, what="the approval task awaiting input")
        seen["response"] = api.patch(
            f"/api/v2/dags/ml_approval_test/dagRuns/{run_id}/taskInstances/approve/-1/hitlDetails",
            json={"chosen_options": ["Reject"], "params_input": {}},
        )

    thread = threading.Thread(target=reviewer, daemon=True)
    thread.start()
    dag_run = approval_dag.test(run_conf={"require_approval": True})
    thread.join(timeout=10)

    request = seen["request"]
    assert request["subject"] == "Promote the new version of approval_test to champion?"
    assert "beats the champion's 0.91" in request["body"] and request["options"] == ["Approve", "Reject"]
    assert seen["response"].status_code == 200, seen["response"].text
    result = record("ml_approval_test", dag_run.run_id, str(dag_run.state))
    assert result.state == "success"
    answer = result.value("deploy")
    assert (answer["required"], answer["approved"], answer["reason"]) == (True, False, f"rejected by {answer['by']}")
    assert answer["by"] and answer["at"]


def _running_approval_run():
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        dag_run = session.query(DagRun).filter_by(dag_id="ml_approval_test").order_by(DagRun.id.desc()).first()
        return dag_run and dag_run.conf.get("require_approval") and str(dag_run.state) == "running" and dag_run.run_id
