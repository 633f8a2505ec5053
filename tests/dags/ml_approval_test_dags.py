"""A gate that passed, then ChampionApprovalOperator (Airflow's HITL), then a task reporting what the
deploy would be told; require_approval is a Param, as in dags/ml_training_pipeline.py."""

from __future__ import annotations

from airflow.sdk import DAG, Param, task

from airflow_ml_provider.operators.approval import ChampionApprovalOperator

with DAG("ml_approval_test", schedule=None,
         params={"require_approval": Param(False, type="boolean")}) as approval_dag:

    @task
    def gate() -> dict:
        return {"passed": True, "reasons": ["accuracy = 0.93 beats the champion's 0.91 (version 3) by 0.02"]}

    approve = ChampionApprovalOperator(
        task_id="approve", gate=gate(), model_name="approval_test",
        evaluation={"metrics": {"accuracy": 0.93}}, require_approval="{{ params.require_approval }}",
    )

    @task
    def deploy(approval: dict) -> dict:
        return approval

    deploy(approve.output)
