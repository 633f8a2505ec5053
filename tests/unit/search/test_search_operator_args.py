"""HyperparameterSearchOperator's arguments: static mistakes fail when the DAG is parsed, naming the field."""

from __future__ import annotations

import pytest
from airflow.sdk import DAG

from airflow_ml_provider.operators.search import HyperparameterSearchOperator
from airflow_ml_provider.operators.training import LightGBMTrainingOperator
from airflow_ml_provider.search.space import SearchSpaceError

SPACE = {"num_leaves": {"type": "int", "low": 4, "high": 31}}


def _trial() -> LightGBMTrainingOperator:
    return LightGBMTrainingOperator(task_id="trial", train_data="/data/train.npz",
                                    lightgbm_params={"num_leaves": "{{ params.num_leaves }}"})


def test_an_invalid_search_space_fails_the_dag_naming_the_field():
    trial = _trial()
    with DAG("search_args", schedule=None), pytest.raises(SearchSpaceError) as error:
        HyperparameterSearchOperator(task_id="search", trial=trial, search={"n_trials": 4},
                                     search_space={"num_leaves": {"type": "int", "low": 31, "high": 4}})
    assert str(error.value).startswith("search: search_space.num_leaves: low (31) must be below high (4)")


def test_invalid_settings_fail_the_dag_naming_the_setting():
    trial = _trial()
    with DAG("search_args", schedule=None), pytest.raises(SearchSpaceError, match="search: search.n_trials: required"):
        HyperparameterSearchOperator(task_id="search", trial=trial, search_space=SPACE, search={"sampler": "random"})


def test_templated_values_are_validated_once_rendered():
    trial = _trial()
    with DAG("search_args", schedule=None):
        operator = HyperparameterSearchOperator(task_id="search", trial=trial, search_space=SPACE,
                                                search={"n_trials": "{{ params.trials }}"})
    assert operator.search == {"n_trials": "{{ params.trials }}"}
    assert "search" in operator.template_fields and "search_space" in operator.template_fields


def test_a_trial_operator_that_is_a_task_of_the_dag_is_refused():
    with DAG("search_args", schedule=None), pytest.raises(ValueError, match="create it before the `with DAG"):
        HyperparameterSearchOperator(task_id="search", trial=_trial(), search_space=SPACE, search={"n_trials": 4})


def test_a_trial_operator_on_another_connection_than_the_search_is_refused():
    trial = LightGBMTrainingOperator(task_id="trial", train_data="/data/train.npz", ml_conn_id="cluster",
                                     lightgbm_params={"num_leaves": "{{ params.num_leaves }}"})
    with DAG("search_args", schedule=None), pytest.raises(ValueError) as error:
        HyperparameterSearchOperator(task_id="search", trial=trial, search_space=SPACE, search={"n_trials": 4})
    assert str(error.value).startswith("search: trial operator 'trial' has ml_conn_id 'cluster', but trials run "
                                       "through the search's connection ('ml_training_default'")
    with DAG("search_args", schedule=None):  # the same connection on both: accepted
        HyperparameterSearchOperator(task_id="search", trial=trial, search_space=SPACE, search={"n_trials": 4}, ml_conn_id="cluster")


def test_the_trial_must_be_a_training_operator_or_a_spec_dict():
    with DAG("search_args", schedule=None), pytest.raises(ValueError, match="got str"):
        HyperparameterSearchOperator(task_id="search", trial="python train.py", search_space=SPACE, search={"n_trials": 4})
    with DAG("search_args", schedule=None):
        HyperparameterSearchOperator(task_id="search", search_space=SPACE, search={"n_trials": 4},
                                     trial={"framework": "generic", "num_workers": 1,
                                            "command": ["python", "train.py", "{{ params.num_leaves }}"]})


def test_the_study_storage_is_never_the_metadata_database(monkeypatch):
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql://airflow:metadata-pw@db/airflow")
    monkeypatch.delenv("AIRFLOW__ML_TRAINING__SEARCH_STORAGE_URL", raising=False)
    operator = HyperparameterSearchOperator(task_id="search", trial=_trial(), search_space=SPACE, search={"n_trials": 2})
    assert operator._storage_url() is None  # the default journal file under $AIRFLOW_HOME/ml/search


def test_a_configured_storage_url_has_its_password_masked_in_logs(monkeypatch):
    from airflow.sdk._shared.secrets_masker.secrets_masker import redact

    url = "postgresql://optuna:optuna-store-pw@db/optuna"
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__SEARCH_STORAGE_URL", url)
    operator = HyperparameterSearchOperator(task_id="search", trial=_trial(), search_space=SPACE, search={"n_trials": 2})
    assert operator._storage_url() == url
    assert redact(f"connecting to {url}") == "connecting to postgresql://optuna:***@db/optuna"
