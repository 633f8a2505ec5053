"""A sharded job on the indexed-job backend, run with dag.test() while the test plays its pods
(tests/integration/kubernetes/test_sharded_indexed_job.py)."""

from __future__ import annotations

from dataclasses import replace

from airflow.sdk import DAG

from airflow_ml_provider.operators.config import JobRequest
from airflow_ml_provider.operators.training import TrainingJobOperator

# A shard's program: shard 2 fails every try; the others count their rows (10 + their index).
SHARD = ("import os, pathlib, sys\ni = os.environ['AIRFLOW_ML_SHARD_INDEX']\nsys.exit(3) if i == '2' else "
         "pathlib.Path(os.environ['AIRFLOW_ML_SHARD_OUTPUT'], '_ROWS').write_text(str(10 + int(i)))")


class ShardedJobOperator(TrainingJobOperator):
    """A generic job with a shard plan (what BatchScoringOperator and PreprocessOperator ask for their data)."""

    def job_request(self) -> JobRequest:
        return replace(super().job_request(), shards={"count": 4, "max_attempts": 2, "max_failed_shards": 1})


with DAG("ml_test_sharded_indexed_job", schedule=None, catchup=False, tags=["test"]) as sharded_indexed_job:
    ShardedJobOperator(task_id="score", command=["python", "-c", SHARD], num_workers=2, deferrable=False,
                       job={"backend": "indexed-job", "image": "registry.example/score:1"},
                       follow={"poll_interval": 0.5}, retries=0)
