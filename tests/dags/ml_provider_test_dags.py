"""DAGs the integration tests run with dag.test(): real jobs on the local backend."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG, task

from airflow_ml_provider.operators.training import (
    HorovodTrainingOperator,
    LightGBMTrainingOperator,
    TrainingJobOperator,
)

PY = "python"

with DAG("ml_test_horovod_and_lightgbm", schedule=None, catchup=False, tags=["test"]) as horovod_and_lightgbm:

    @task
    def make_data() -> dict[str, str]:
        from airflow_ml_provider.runtime.datasets import write_synthetic

        out = Path(os.environ["AIRFLOW_HOME"]) / "ml" / "data" / "test"  # the local root's data/: jobs see it
        out.mkdir(parents=True, exist_ok=True)
        write_synthetic(out / "train.npz", out / "valid.npz", rows=20_000, features=20, seed=7)
        return {"train": str(out / "train.npz"), "valid": str(out / "valid.npz")}

    data = make_data()
    HorovodTrainingOperator(
        task_id="horovod",
        command=[PY, "-m", "airflow_ml_provider.runtime.horovod_keras", "--epochs", "3", "--seed", "0"],
        num_workers=2,
        job={"backend": "local"},
    )
    LightGBMTrainingOperator(
        task_id="lightgbm",
        train_data="{{ ti.xcom_pull('make_data')['train'] }}",
        valid_data="{{ ti.xcom_pull('make_data')['valid'] }}",
        lightgbm_params={"objective": "binary", "learning_rate": 0.1, "num_leaves": 31, "seed": 0},
        num_boost_round=50,
        num_workers=2,
        job={"backend": "local"},
    ).set_upstream(data)

_FAIL = "import os, sys\nrank = os.environ['AIRFLOW_ML_RANK']\nprint('working', rank, flush=True)\nsys.exit(3 if rank == '1' else 0)"
_METRICS = (
    "import json, os\n"
    "for step in range(1, 4):\n"
    "    print(json.dumps({'event': 'metrics', 'step': step, 'loss': 1.0 / step}), flush=True)\n"
    "print(json.dumps({'event': 'result', 'accuracy': 0.9}), flush=True)"
)

with DAG("ml_test_generic", schedule=None, catchup=False, tags=["test"]) as generic:
    TrainingJobOperator(task_id="fails", command=[PY, "-c", _FAIL], num_workers=2, retries=0)
    TrainingJobOperator(task_id="deferred", command=[PY, "-c", _METRICS], num_workers=2, deferrable=True,
                        follow={"poll_interval": 0.5})

_SLEEP = "import os, time\nprint('ready', flush=True)\ntime.sleep(600)"

with DAG("ml_test_kill", schedule=None, catchup=False, tags=["test"]) as kill:
    HorovodTrainingOperator(task_id="sleeper", command=[PY, "-c", _SLEEP], num_workers=2, retries=0)

def _mpijob_dag(dag_id: str, deferrable: bool) -> DAG:
    with DAG(dag_id, schedule=None, catchup=False, tags=["test"]) as dag:
        # The test plays the MPI operator; the namespace comes from the kubernetes_default connection.
        # Sync: the task's own process follows the job (the shared watch in a private event loop).
        HorovodTrainingOperator(task_id="train", command=[PY, "-m", "train"], num_workers=2,
                                job={"backend": "mpijob", "image": "registry.example/train:1"},
                                deferrable=deferrable, follow={"poll_interval": 0.5}, retries=0)
    return dag


mpijob = _mpijob_dag("ml_test_mpijob", deferrable=True)
mpijob_sync = _mpijob_dag("ml_test_mpijob_sync", deferrable=False)

_OOM = "import time\nprint('epoch 1 loss=0.9', flush=True)\nprint('RuntimeError: CUDA out of memory', flush=True)\ntime.sleep(600)"
_RESET = "import time\nprint('socket: Connection reset by peer', flush=True)\ntime.sleep(600)"

with DAG("ml_test_log_rules", schedule=None, catchup=False, tags=["test"],
         default_args={"retry_delay": timedelta(seconds=0)}) as log_rules:
    for deferrable in (False, True):
        TrainingJobOperator(task_id=f"oom_{'deferred' if deferrable else 'sync'}", command=[PY, "-c", _OOM],
                            num_workers=1, retries=2, deferrable=deferrable,
                            follow={"rules": {"fail_on": [r"CUDA out of memory"], "retry_on": [r"Connection reset"]},
                                    "poll_interval": 0.5})
    TrainingJobOperator(task_id="flaky", command=[PY, "-c", _RESET], num_workers=1, retries=1,
                        follow={"rules": {"fail_on": [r"CUDA out of memory"], "retry_on": [r"Connection reset by peer"]},
                                "poll_interval": 0.5})

# One read of the training connection and one spec built per try (tests/integration/operators/test_one_setup_per_try.py).
with DAG("ml_test_setup_count", schedule=None, catchup=False, tags=["test"]) as setup_count:
    TrainingJobOperator(task_id="train", command=[PY, "-c", _METRICS], num_workers=1, retries=0,
                        ml_conn_id="ml_setup_count", follow={"poll_interval": 0.2})
