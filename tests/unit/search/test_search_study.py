"""Where the study lives, what it is called, and that a second session loads it again."""

from __future__ import annotations

import optuna
import pytest

from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.search.space import SearchSpaceError, parse_settings, parse_space
from airflow_ml_provider.jobs.search.study import (
    OPTUNA_SCHEMA,
    StorageConfig,
    derive_storage,
    open_storage,
    open_study,
    study_name,
)


def test_sqlite_metadata_gets_a_sibling_file_never_airflows_own_tables():
    assert derive_storage("sqlite:////opt/airflow/airflow.db") == StorageConfig("sqlite:////opt/airflow/optuna.db")
    with pytest.raises(ValueError, match="in memory"):
        derive_storage("sqlite://")


def test_postgres_metadata_gets_a_schema_of_its_own():
    config = derive_storage("postgresql+psycopg2://airflow:secret@db:5432/airflow")
    assert config.url == "postgresql+psycopg2://airflow:secret@db:5432/airflow"
    assert config.engine_kwargs == {"connect_args": {"options": f"-csearch_path={OPTUNA_SCHEMA}"}}
    assert config.schema == OPTUNA_SCHEMA


def test_other_metadata_databases_need_a_configured_url():
    with pytest.raises(ValueError, match="cannot derive a search storage from a mysql metadata database"):
        derive_storage("mysql+mysqldb://airflow:secret@db/airflow")


def test_the_study_name_identifies_the_task_instance():
    assert study_name(JobIdentity("dag", "search", "manual__1")) == "dag/search/manual__1"
    assert study_name(JobIdentity("dag", "search", "manual__1", map_index=2)) == "dag/search/manual__1/2"


def test_a_second_session_loads_the_same_study(tmp_path):
    space = parse_space({"x": {"type": "float", "low": 0.0, "high": 1.0}})
    settings = parse_settings(n_trials=4, seed=1)
    storage = StorageConfig(f"sqlite:///{tmp_path / 'optuna.db'}")
    first = open_study(open_storage(storage), "dag/search/run", settings, space)
    trial = first.ask()
    first.tell(trial, space.suggest(trial)["x"])

    again = open_study(open_storage(storage), "dag/search/run", settings, space)
    assert [(t.number, t.state) for t in again.trials] == [(0, optuna.trial.TrialState.COMPLETE)]
    with pytest.raises(SearchSpaceError, match="direction: study 'dag/search/run' already exists"):
        open_study(open_storage(storage), "dag/search/run", parse_settings(n_trials=4, direction="minimize"), space)
