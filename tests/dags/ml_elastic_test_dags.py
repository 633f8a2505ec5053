"""DAGs for the preemption tests: a fixed-size Horovod job preempted mid-training (local backend), and
MPIJobs whose status the test writes (evicted, or failed by the user's code)."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_ml_provider.operators.training import HorovodTrainingOperator

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
