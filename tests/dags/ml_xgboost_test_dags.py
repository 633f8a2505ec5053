"""DAGs for the XGBoost tests (local backend): a user's own CommunicatorContext script run unchanged by two
workers, and the bundled trainer preempted mid-training (the test SIGKILLs a worker) beside an uninterrupted
reference run."""

from __future__ import annotations

import os
from pathlib import Path

from airflow.sdk import DAG, task

from airflow_ml_provider.operators.training import XGBoostTrainingOperator

USER_SCRIPT = str(Path(__file__).parents[1] / "fixtures" / "xgboost" / "user_script.py")
ROUNDS = 120  # keep in step with tests/integration/xgboost/test_xgboost_dags.py
PARAMS = {"max_depth": 6, "eta": 0.1, "seed": 0}

with DAG("ml_test_xgboost_user_script", schedule=None, catchup=False, tags=["test"]) as user_script:
    XGBoostTrainingOperator(task_id="train", command=["python", USER_SCRIPT, "--rounds", "10"], num_workers=2,
                            job={"backend": "local"}, retries=0)

with DAG("ml_test_xgboost_preemption", schedule=None, catchup=False, tags=["test"]) as preemption:

    @task
    def make_data() -> dict[str, str]:
        from airflow_ml_provider.runtime.datasets import write_synthetic

        out = Path(os.environ["AIRFLOW_HOME"]) / "ml" / "data" / "xgboost"  # the local root's data/: jobs see it
        out.mkdir(parents=True, exist_ok=True)
        write_synthetic(out / "train.npz", out / "valid.npz", rows=100_000, features=20, seed=3)
        return {"train": str(out / "train.npz"), "valid": str(out / "valid.npz")}

    data = make_data()
    common = dict(train_data="{{ ti.xcom_pull('make_data')['train'] }}",
                  valid_data="{{ ti.xcom_pull('make_data')['valid'] }}", xgboost_params=PARAMS,
                  num_boost_round=ROUNDS, num_workers=2, job={"backend": "local"}, retries=0,
                  command=["python", "-m", "airflow_ml_provider.runtime.xgboost_trainer", "--checkpoint-every", "10"])
    reference = XGBoostTrainingOperator(task_id="uninterrupted", **common)
    preempted = XGBoostTrainingOperator(task_id="preempted", follow={"max_preemptions": 2}, **common)
    data >> reference >> preempted
