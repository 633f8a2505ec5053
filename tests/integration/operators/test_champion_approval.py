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


def _awaiting(run_id: str, defaults: bool = False, dag_id: str = "ml_approval_test"):
    from airflow.models.hitl import HITLDetail
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=run_id, task_id="approve").one()
        if str(ti.state) != "awaiting_input":
            return None
        detail = session.query(HITLDetail).filter_by(ti_id=ti.id).one()
        request = {"subject": detail.subject, "body": detail.body, "options": detail.options}
        return {**request, "defaults": detail.defaults} if defaults else request


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


def _running_approval_run(dag_id: str = "ml_approval_test"):
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        dag_run = session.query(DagRun).filter_by(dag_id=dag_id).order_by(DagRun.id.desc()).first()
        return dag_run and dag_run.conf.get("require_approval") and str(dag_run.state) == "running" and dag_run.run_id


def test_approve_is_the_highlighted_default_but_a_timeout_never_approves(airflow_db):
    """Issue 25 D8: the HITL form highlighted Reject (the request's ``defaults``). Approve is now the default
    the form highlights (the task asks only when the gate passed); when the response timeout passes, the
    scheduler's own sweep (run here on the real code) applies that default, and it counts as not approved."""
    import logging
    from types import SimpleNamespace

    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner

    dag = load_dag(TEST_DAGS / "ml_approval_test_dags.py", "approval_timeout_dag")
    seen = {}

    def scheduler_sweep():
        run_id = wait_for(lambda: _running_approval_run(dag.dag_id), what="the approval run")
        seen["request"] = wait_for(lambda: _awaiting(run_id, defaults=True, dag_id=dag.dag_id), timeout=300,
                                   what="the approval task awaiting input")
        sweeper = SimpleNamespace(log=logging.getLogger("sweep"))
        wait_for(lambda: SchedulerJobRunner.check_awaiting_input_timeouts(sweeper)
                 or not _awaiting(run_id, dag_id=dag.dag_id),
                 timeout=120, what="the timeout sweep to resume the task")

    thread = threading.Thread(target=scheduler_sweep, daemon=True)
    thread.start()
    dag_run = dag.test(run_conf={"require_approval": True})
    thread.join(timeout=10)

    assert seen["request"]["defaults"] == ["Approve"]  # what the Required Actions form highlights
    answer = record(dag.dag_id, dag_run.run_id, str(dag_run.state)).value("deploy")
    assert (answer["required"], answer["approved"], answer["by"]) == (True, False, None)
    assert answer["reason"] == "not approved: nobody answered within 0:00:01"
