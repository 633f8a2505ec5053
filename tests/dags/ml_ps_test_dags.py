"""DAGs for the parameter-server tests (local backend): 2 ps, 2 workers and a chief train through the operator."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_ml_provider.operators.parameter_server import ParameterServerTrainingOperator

with DAG("ml_test_parameter_servers", schedule=None, catchup=False, tags=["test"]) as parameter_servers:
    ParameterServerTrainingOperator(task_id="train", num_ps=2, num_workers=2, steps="{{ 100 + 50 }}",
                                    job={"backend": "local"}, retries=0)
