"""A hyperparameter search DAG the integration tests run with dag.test(): LightGBM trials on the local backend."""

from __future__ import annotations

import os
from pathlib import Path

from airflow.sdk import DAG, task

from airflow_ml_provider.operators.search import HyperparameterSearchOperator
from airflow_ml_provider.operators.training import LightGBMTrainingOperator
from airflow_ml_provider.search.space import SearchSettings

# The trial template is created outside the DAG, so it is not a task of its own. Airflow templates
# (the data paths, the DAG's `rounds` param) are rendered by the search task; the search parameters'
# placeholders are replaced per trial.
lightgbm_trial = LightGBMTrainingOperator(
    task_id="lightgbm_trial",
    train_data="{{ ti.xcom_pull('search_data')['train'] }}",
    valid_data="{{ ti.xcom_pull('search_data')['valid'] }}",
    lightgbm_params={"objective": "binary", "learning_rate": "{{ params.learning_rate }}",
                     "num_leaves": "{{ params.num_leaves }}", "feature_fraction": "{{ params.feature_fraction }}",
                     "seed": 0},
    num_boost_round="{{ params.rounds }}",
    job={"backend": "local"},
)



@task
def search_data() -> dict[str, str]:
    from airflow_ml_provider.runtime.datasets import write_synthetic

    out = Path(os.environ["AIRFLOW_HOME"]) / "ml" / "data" / "search-test"  # the local root's data/: jobs see it
    out.mkdir(parents=True, exist_ok=True)
    write_synthetic(out / "train.npz", out / "valid.npz", rows=3000, features=12, seed=3)
    return {"train": str(out / "train.npz"), "valid": str(out / "valid.npz")}


with DAG("ml_test_search", schedule=None, catchup=False, tags=["test"], params={"rounds": 15}) as search:
    search_data() >> HyperparameterSearchOperator(
        task_id="search",
        trial=lightgbm_trial,
        search_space={
            "learning_rate": {"type": "float", "low": 0.02, "high": 0.3, "log": True},
            "num_leaves": {"type": "int", "low": 4, "high": 31},
            "feature_fraction": [0.5, 1.0],
        },
        search={"sampler": "tpe", "n_trials": 4, "max_parallel": 2, "seed": 0, "pruner": "none", "poll_interval": 0.3},
        retries=0,
    )


# A deferred search: the trigger runs ask/tell and the trials' jobs (a one-line Python objective each).
_OBJECTIVE = ("import json, sys; x = float(sys.argv[1]); "
              "print(json.dumps({'event': 'result', 'score': round(1 - (x - 0.3) ** 2, 6)}))")

with DAG("ml_test_search_deferred", schedule=None, catchup=False, tags=["test"]) as search_deferred:
    HyperparameterSearchOperator(
        task_id="search",
        trial={"framework": "generic", "num_workers": 1, "command": ["python", "-c", _OBJECTIVE, "{{ params.x }}"]},
        search_space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
        search=SearchSettings(sampler="random", n_trials=4, max_parallel=2, objective_metric="score", seed=0,
                              pruner="none", poll_interval=0.2),
        backend="local",
        deferrable=True,
        track_mlflow=False,
        retries=0,
    )


# Two-trial LightGBM searches whose trials keep their models and checkpoints under the training
# connection's artifact_root (the object-storage test points it at S3): an operator trial run on a
# worker, and a TrainingJobSpec dict trial run in the triggerer.
_ARTIFACT_SEARCH = {"search_space": {"learning_rate": [0.1], "num_leaves": [4, 8], "feature_fraction": [1.0]},
                    "search": {"sampler": "grid", "max_parallel": 2, "pruner": "none", "poll_interval": 0.3},
                    "track_mlflow": False, "retries": 0}

with DAG("ml_test_search_artifacts", schedule=None, catchup=False, tags=["test"], params={"rounds": 12}) as artifacts:
    search_data() >> HyperparameterSearchOperator(task_id="search", trial=lightgbm_trial, **_ARTIFACT_SEARCH)

with DAG("ml_test_search_artifacts_deferred", schedule=None, catchup=False, tags=["test"]) as artifacts_deferred:
    search_data() >> HyperparameterSearchOperator(
        task_id="search",
        trial={"framework": "lightgbm", "num_workers": 1, "command": [
            "python", "-m", "airflow_ml_provider.runtime.lightgbm_trainer",
            "--train-data", "{{ ti.xcom_pull('search_data')['train'] }}",
            "--valid-data", "{{ ti.xcom_pull('search_data')['valid'] }}",
            "--params-json", '{"objective": "binary", "learning_rate": "{{ params.learning_rate }}", '
                             '"num_leaves": "{{ params.num_leaves }}", '
                             '"feature_fraction": "{{ params.feature_fraction }}", "seed": 0}',
            "--num-boost-round", "12"]},
        backend="local",
        deferrable=True,
        **_ARTIFACT_SEARCH,
    )
