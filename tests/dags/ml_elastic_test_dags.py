"""DAGs for the preemption tests: a fixed-size Horovod job preempted mid-training (local backend),
MPIJobs whose status the test writes (evicted, or failed by the user's code), and a job on each
Kubernetes backend whose worker pod the test disrupts (spot)."""

from __future__ import annotations

import datetime

from airflow.sdk import DAG

from airflow_ml_provider.operators.training import HorovodTrainingOperator, PyTorchTrainingOperator

TRAIN = ["python", "-m", "airflow_ml_provider.runtime.horovod_keras", "--epochs", "8", "--seed", "0"]

with DAG("ml_test_preemption", schedule=None, catchup=False, tags=["test"]) as preemption:
    # Same trainer and seed twice: the reference run, and the run the test preempts once.
    reference = HorovodTrainingOperator(task_id="uninterrupted", command=TRAIN, num_workers=2, retries=0,
                                        job={"backend": "local", "env": {"TF_CPP_MIN_LOG_LEVEL": "2"}})
    preempted = HorovodTrainingOperator(task_id="preempted", command=TRAIN, num_workers=2, retries=0,
                                        job={"backend": "local", "env": {"TF_CPP_MIN_LOG_LEVEL": "2"}},
                                        follow={"max_preemptions": 2})
    reference >> preempted



def _mpijob_dag(dag_id: str) -> DAG:
    with DAG(dag_id, schedule=None, catchup=False, tags=["test"]) as dag:
        # The test plays the MPI operator; deferrable, so execute_complete resubmits after the trigger.
        HorovodTrainingOperator(task_id="train", num_workers=2,
                                job={"backend": "mpijob", "image": "registry.example/train:1"},
                                outputs={"checkpoint_dir": "/ckpt"}, deferrable=True, follow={"poll_interval": 0.5},
                                retries=0)
    return dag


mpijob_evicted = _mpijob_dag("ml_test_mpijob_evicted")
mpijob_user_failure = _mpijob_dag("ml_test_mpijob_user_failure")


def _spot_dag(backend: str, operator: type) -> DAG:
    """A deferrable job on ``backend`` whose worker pod the test disrupts; it checkpoints under /ckpt. The
    timeout ends the run should the test's controller double fail."""
    with DAG(f"ml_test_spot_{backend.replace('-', '_')}", schedule=None, catchup=False, tags=["test"]) as dag:
        operator(task_id="train", num_workers=2, job={"backend": backend, "image": "registry.example/train:1"},
                 outputs={"checkpoint_dir": "/ckpt"}, deferrable=True, follow={"poll_interval": 0.5}, retries=0,
                 execution_timeout=datetime.timedelta(minutes=5))
    return dag


spot_mpijob = _spot_dag("mpijob", HorovodTrainingOperator)
spot_volcano = _spot_dag("volcano", PyTorchTrainingOperator)
spot_indexed_job = _spot_dag("indexed-job", PyTorchTrainingOperator)
spot_trainjob = _spot_dag("trainjob", PyTorchTrainingOperator)
