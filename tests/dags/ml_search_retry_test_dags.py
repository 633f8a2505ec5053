"""Searches whose first try fails after its trials ran, and whose second try runs one more trial (dag.test() retries
them at once): what a new try of the search task leaves of the first try's trial views (its XComs
``ml_trial_view_<n>``). Each first try records, before it fails, the trial views it can read back, in
``$AIRFLOW_HOME/ml/retry-views-<dag_id>.json``. The trials are one-line Python objectives on the local backend; one
search follows them on the worker, the other in the triggerer."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowException

from airflow_ml_provider import xcom_keys
from airflow_ml_provider.operators.search import HyperparameterSearchOperator

_OBJECTIVE = ("import json, sys; x = float(sys.argv[1]); "
              "print(json.dumps({'event': 'result', 'score': round(1 - (x - 0.3) ** 2, 6)}))")


def views_file(dag_id: str) -> Path:
    return Path(os.environ["AIRFLOW_HOME"]) / "ml" / f"retry-views-{dag_id}.json"


def fail_the_first_try(context, result) -> None:
    """After the search's first try: note the trial views it saved, then fail it (a retryable failure)."""
    ti = context["ti"]
    if ti.try_number > 1:
        return
    views = {number: ti.xcom_pull(task_ids=ti.task_id, key=xcom_keys.trial_view(number), map_indexes=ti.map_index)
             for number in range(3)}
    views_file(ti.dag_id).write_text(json.dumps({n: (v or {}).get("job") for n, v in views.items()}))
    raise AirflowException("the first try fails after its trials (a test of what a retry keeps)")


for _dag_id, _deferrable in (("ml_test_search_retry", False), ("ml_test_search_retry_deferred", True)):
    with DAG(_dag_id, schedule=None, catchup=False, tags=["test"]) as _dag:
        HyperparameterSearchOperator(
            task_id="search",
            trial={"framework": "generic", "num_workers": 1, "command": ["python", "-c", _OBJECTIVE, "{{ params.x }}"]},
            search_space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
            # two trials in the first try, the third in the second (the study keeps the first two)
            search={"sampler": "random", "n_trials": "{{ 2 if ti.try_number == 1 else 3 }}", "max_parallel": 1,
                    "objective_metric": "score", "seed": 0, "pruner": "none", "poll_interval": 0.2},
            backend="local",
            deferrable=_deferrable,
            track_mlflow=False,
            retries=1,
            retry_delay=timedelta(0),
            post_execute=fail_the_first_try,
        )
    globals()[_dag_id] = _dag
