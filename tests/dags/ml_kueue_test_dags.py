"""DAGs for the Kueue tests: MPIJobs that Kueue (played by the test) admits, evicts and admits again,
followed by a sync and a deferred task; and one whose wait for admission is bounded by max_queue_s."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG

from airflow_ml_provider.operators.training import HorovodTrainingOperator

SCHEDULING = {"queue": "team-a", "priority_class": "high-priority"}


def _kueue_dag(dag_id: str, deferrable: bool, **options) -> DAG:
    with DAG(dag_id, schedule=None, catchup=False, tags=["test"]) as dag:
        HorovodTrainingOperator(task_id="train", num_workers=2, outputs={"checkpoint_dir": "/ckpt"},
                                job={"backend": "mpijob", "image": "registry.example/train:1", "scheduling": SCHEDULING},
                                follow={"poll_interval": 0.5, **options}, deferrable=deferrable, retries=0,
                                execution_timeout=timedelta(minutes=5))
    return dag


kueue_sync = _kueue_dag("ml_test_kueue_sync", deferrable=False)
kueue_deferred = _kueue_dag("ml_test_kueue_deferred", deferrable=True)
kueue_max_queue = _kueue_dag("ml_test_kueue_max_queue", deferrable=False, max_queue_s=10)
# queued longer than the task's execution_timeout, with no max_queue_s: Airflow's deadline covers the queue too
kueue_execution_timeout = _kueue_dag("ml_test_kueue_execution_timeout", deferrable=False)
kueue_execution_timeout.get_task("train").execution_timeout = timedelta(seconds=20)
