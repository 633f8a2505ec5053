"""A training task on a cluster backend whose API server cannot be reached (the test's connections point
``kubernetes_default`` at a closed port): issue 45 D7."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_ml_provider.operators.training import TrainingJobOperator

with DAG("ml_unreachable_cluster_test", schedule=None) as unreachable_dag:
    TrainingJobOperator(task_id="train", command=["python", "-c", "print('never runs')"],
                        job={"backend": "indexed-job", "image": "registry.example.com/team/train:1"})
