"""DAGs the Elasticsearch log tests run with dag.test(): ElasticsearchLogSensor on three jobs' logs, and
training operators reading their job's log from Elasticsearch.

The ``es_logs_dag`` (and ``ml_training_es``) connections are set by the tests (they point at the test
double or a real cluster); nothing here touches the network at parse time.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, task

from airflow_ml_provider.operators.search import HyperparameterSearchOperator
from airflow_ml_provider.operators.training import TrainingJobOperator
from airflow_ml_provider.sensors.elasticsearch_log import ElasticsearchLogSensor

RULES = {
    "succeed_on": [r"Training finished"],
    "fail_on": [r"CUDA out of memory", r"NCCL.*timeout"],
    "retry_on": [r"Connection reset by peer"],
    "metrics": [r"loss=(?P<loss>[0-9.]+)"],
}
COMMON = {"elasticsearch_conn_id": "es_logs_dag", "poke_interval": 0.2, "timeout": 300, "follow": {"rules": RULES}}

with DAG("ml_test_es_log_sensor", schedule=None, catchup=False, tags=["test"]) as es_log_sensor:

    @task
    def train() -> dict[str, str]:
        return {"job_name": "es-job-ok"}

    # Deferred: the trigger keeps its read position durable in an XCom after every batch.
    ElasticsearchLogSensor(task_id="watch", job="{{ ti.xcom_pull('train')['job_name'] }}", deferrable=True,
                           **COMMON).set_upstream(train())
    ElasticsearchLogSensor(task_id="oom", job="es-job-oom", deferrable=False, retries=2, **COMMON)
    ElasticsearchLogSensor(task_id="flaky", job="es-job-flaky", deferrable=True, retries=1,
                           retry_delay=timedelta(0), **COMMON)

_TRAIN = (
    "import json, os\n"
    "rank = os.environ['AIRFLOW_ML_RANK']\n"
    "for step in range(1, 4):\n"
    "    print(f'rank {rank} epoch {step}', flush=True)\n"
    "    if rank == '0':\n"
    "        print(json.dumps({'event': 'metrics', 'step': step, 'loss': 1.0 / step}), flush=True)\n"
    "if rank == '0':\n"
    "    print(json.dumps({'event': 'result', 'accuracy': 0.9}), flush=True)"
)

with DAG("ml_test_es_training_logs", schedule=None, catchup=False, tags=["test"]) as es_training_logs:
    # The connection is named on the task here, and configured on the training connection below.
    TrainingJobOperator(task_id="train_es", command=["python", "-c", _TRAIN], num_workers=2,
                        elasticsearch_conn_id="es_logs_dag", follow={"poll_interval": 0.2}, retries=0)
    TrainingJobOperator(task_id="train_es_deferred", command=["python", "-c", _TRAIN], num_workers=2,
                        ml_conn_id="ml_training_es", deferrable=True, follow={"poll_interval": 0.2}, retries=0)

# A search's trials read their logs where a training task of the connection would: from Elasticsearch.
_OBJECTIVE = ("import json, sys; x = float(sys.argv[1]); print('trial says', x, flush=True); "
              "print(json.dumps({'event': 'result', 'score': round(1 - (x - 0.3) ** 2, 6)}))")
_ES_SEARCH = {
    "trial": {"framework": "generic", "num_workers": 1, "command": ["python", "-c", _OBJECTIVE, "{{ params.x }}"]},
    "search_space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
    "search": {"sampler": "random", "n_trials": 2, "max_parallel": 2, "objective_metric": "score", "seed": 0,
               "pruner": "none", "poll_interval": 0.2},
    "backend": "local", "ml_conn_id": "ml_training_es", "track_mlflow": False, "retries": 0,
}

with DAG("ml_test_es_search_logs", schedule=None, catchup=False, tags=["test"]) as es_search_logs:
    HyperparameterSearchOperator(task_id="search", **_ES_SEARCH)
    HyperparameterSearchOperator(task_id="search_deferred", deferrable=True, **_ES_SEARCH)
