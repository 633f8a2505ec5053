"""A gate that passed, then ChampionApprovalOperator (Airflow's HITL), then a task reporting what the
deploy would be told; require_approval is a Param, as in dags/ml_training_pipeline.py. The second DAG
waits one second for an answer (the timeout test)."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param, task

from airflow_ml_provider.operators.approval import ChampionApprovalOperator


def _approval_dag(dag_id: str, response_timeout: timedelta | None = None) -> DAG:
    with DAG(dag_id, schedule=None, params={"require_approval": Param(False, type="boolean")}) as dag:

        @task
        def gate() -> dict:
            return {"passed": True, "reasons": ["accuracy = 0.93 beats the champion's 0.91 (version 3) by 0.02"]}

        approve = ChampionApprovalOperator(
            task_id="approve", gate=gate(), model_name="approval_test",
            evaluation={"metrics": {"accuracy": 0.93}}, require_approval="{{ params.require_approval }}",
            response_timeout=response_timeout,
        )

        @task
        def deploy(approval: dict) -> dict:
            return approval

        deploy(approve.output)
    return dag


approval_dag = _approval_dag("ml_approval_test")
approval_timeout_dag = _approval_dag("ml_approval_timeout_test", timedelta(seconds=1))
