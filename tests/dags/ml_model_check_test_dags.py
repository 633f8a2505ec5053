"""An evaluation that scores a registered champion on the same rows (tests/integration/assets/test_tampered_models.py):
the champion's file is checked against its version's airflow.model_sha256 tag before the job loads it."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_ml_provider.operators.evaluate import EvaluateModelOperator

with DAG("ml_model_check_test", schedule=None, catchup=False, tags=["test"], default_args={"retries": 0},
         params={"model_name": "asset_test", "model_path": "", "test_data": ""}) as evaluate_against_champion:
    EvaluateModelOperator(
        task_id="evaluate",
        training={"job_name": "model-check-test", "backend": "local", "model_path": "{{ params.model_path }}"},
        test_data="{{ params.test_data }}",
        model_name="{{ params.model_name }}",
        model_names=["asset_test*"],
        follow={"poll_interval": 0.5},
    )
