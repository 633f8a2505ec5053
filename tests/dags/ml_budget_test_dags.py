"""A search whose budget comes from the trigger conf: tests/security/test_budgets.py runs it with dag.test()
to show that an over-budget search fails before it creates any trial job."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_ml_provider.operators.search import HyperparameterSearchOperator

with DAG("ml_test_search_budget", schedule=None, catchup=False, tags=["test"],
         params={"parallel": 1, "trials": 1}) as search_budget:
    HyperparameterSearchOperator(
        task_id="tune",
        trial={"framework": "generic", "num_workers": 1,
               "command": ["python", "-c", "print('{\"auc\": {{ params.x }}}')"]},
        search_space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
        search={"sampler": "random", "n_trials": "{{ params.trials }}", "max_parallel": "{{ params.parallel }}",
                "objective_metric": "auc"},
        backend="local",
        track_mlflow=False,
        deferrable=False,
    )
