"""Quick start: a real 2-worker Horovod/TensorFlow model and a real 2-worker LightGBM model.

Runs on the embedded default (the local backend); set ``job={"backend": ...}`` or the ``ml_training_default``
connection's ``backend`` extra to move the same DAG to a cluster.

**Trigger it** with the defaults: `make_data` writes a synthetic binary classification set,
`train_horovod` (Keras on scikit-learn's digits) and `train_lightgbm` train on 2 workers each, with
their metric lines in the task logs, and `report` says where each model is and what it scored.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from airflow.sdk import DAG, Param, task

from airflow_ml_provider.operators.training import HorovodTrainingOperator, LightGBMTrainingOperator
from airflow_ml_provider.patterns import required

with DAG(
    dag_id="ml_quickstart",
    schedule=None,
    catchup=False,
    tags=["ml", "example"],
    description="A 2-worker Horovod/TensorFlow model and a 2-worker LightGBM model, on the local backend",
    doc_md=__doc__,
    params={
        "epochs": Param(5, title="Epochs", description="Horovod training epochs: a whole number from 1 to 100.",
                        **required("integer", "Epochs: a whole number from 1 to 100.", minimum=1, maximum=100)),
        "workers": Param(2, title="Workers", description="Workers per training job: a whole number from 1 to 16.",
                         **required("integer", "Workers: a whole number from 1 to 16.", minimum=1, maximum=16)),
        "boost_rounds": Param(
            100, title="Boosting rounds", description="LightGBM rounds: a whole number from 1 to 5000.",
            **required("integer", "Boosting rounds: a whole number from 1 to 5000.", minimum=1, maximum=5000)),
    },
) as dag:

    @task
    def make_data(run_id: str | None = None) -> dict[str, str]:
        """A synthetic binary classification set, one directory per run (data is never in XCom)."""
        from airflow_ml_provider.runtime.datasets import write_synthetic

        out = Path(os.environ.get("AIRFLOW_HOME", "~/airflow")).expanduser() / "ml" / "data"
        out = out / hashlib.sha256(run_id.encode()).hexdigest()[:12]
        out.mkdir(parents=True, exist_ok=True)
        write_synthetic(out / "train.npz", out / "valid.npz", rows=50_000, features=20, seed=0)
        return {"train": str(out / "train.npz"), "valid": str(out / "valid.npz")}

    horovod = HorovodTrainingOperator(
        task_id="train_horovod",
        command=["python", "-m", "airflow_ml_provider.runtime.horovod_keras", "--epochs", "{{ params.epochs }}"],
        num_workers="{{ params.workers }}",
    )
    lightgbm = LightGBMTrainingOperator(
        task_id="train_lightgbm",
        train_data="{{ ti.xcom_pull('make_data')['train'] }}",
        valid_data="{{ ti.xcom_pull('make_data')['valid'] }}",
        lightgbm_params={"objective": "binary", "learning_rate": 0.1, "num_leaves": 31, "seed": 0},
        num_boost_round="{{ params.boost_rounds }}",
        num_workers="{{ params.workers }}",
    )

    @task
    def report(horovod_result: dict, lightgbm_result: dict) -> dict:
        """Where the models and their metrics are."""
        summary = {"horovod": horovod_result, "lightgbm": lightgbm_result}
        for name, result in summary.items():
            print(f"{name}: model at {result['model_path']}, metrics {result['metrics']}")
        return summary

    make_data() >> lightgbm
    report(horovod.output, lightgbm.output)
