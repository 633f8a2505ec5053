"""A job reporting metrics over a few seconds (one JSON metrics line every 1.5 s, as the bundled trainers
print them), whose follower feeds Airflow's metrics, from the worker or (deferred) from the triggerer (tests/integration/operators/test_training_metrics.py
points StatsD at a loopback socket)."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_ml_provider.operators.training import TrainingJobOperator

REPORT = (
    "import json, time\n"
    "for step in range(1, 5):\n"
    "    time.sleep(1.5)\n"
    "    print(json.dumps({'event': 'metrics', 'step': step * 10, 'loss': 1.0 / step}), flush=True)\n"
)

with DAG("ml_metrics_test", schedule=None) as metrics_dag:
    TrainingJobOperator(task_id="train", command=["python", "-c", REPORT], num_workers=1)

with DAG("ml_metrics_test_deferred", schedule=None) as metrics_deferred_dag:  # followed in the triggerer
    TrainingJobOperator(task_id="train", command=["python", "-c", REPORT], num_workers=1, deferrable=True)
