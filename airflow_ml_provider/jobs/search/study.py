"""Where a search's state lives (an Optuna RDB storage) and the study a restarted task loads again."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from sqlalchemy.engine import make_url

from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.search.space import (
    SearchSettings,
    SearchSpace,
    SearchSpaceError,
    make_pruner,
    make_sampler,
)

OPTUNA_SCHEMA = "airflow_ml_optuna"


@dataclass(frozen=True)
class StorageConfig:
    """An SQLAlchemy URL plus engine arguments for Optuna's RDBStorage."""

    url: str
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    schema: str | None = None  # created on first use (PostgreSQL)


def derive_storage(metadata_db_url: str) -> StorageConfig:
    """Optuna storage beside the Airflow metadata database, without touching Airflow's tables.

    Optuna keeps its schema version in an ``alembic_version`` table, as Airflow does, so the two never
    share a namespace: SQLite gets a sibling file (``optuna.db`` next to ``airflow.db``), PostgreSQL a
    schema of its own in the same database. Other databases need a configured URL.

    Raises:
        ValueError: for a database this cannot derive a separate namespace in.
    """
    url = make_url(metadata_db_url)
    backend = url.get_backend_name()
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise ValueError("the Airflow metadata database is in memory; configure a storage URL for the search")
        return StorageConfig(str(url.set(database=str(Path(url.database).with_name("optuna.db")))))
    if backend == "postgresql":
        return StorageConfig(
            url.render_as_string(hide_password=False),
            {"connect_args": {"options": f"-csearch_path={OPTUNA_SCHEMA}"}},
            schema=OPTUNA_SCHEMA,
        )
    raise ValueError(f"cannot derive a search storage from a {backend} metadata database; configure a storage URL")


def open_storage(config: StorageConfig) -> optuna.storages.RDBStorage:
    """The RDB storage (tables created on first use). No heartbeat: a trial whose process died stays
    RUNNING, and the next session re-attaches to its job instead of failing it."""
    if config.schema:
        import sqlalchemy

        engine = sqlalchemy.create_engine(config.url)
        with engine.begin() as connection:
            connection.execute(sqlalchemy.text(f'CREATE SCHEMA IF NOT EXISTS "{config.schema}"'))
        engine.dispose()
    return optuna.storages.RDBStorage(config.url, engine_kwargs=config.engine_kwargs)


def study_name(identity: JobIdentity) -> str:
    """One study per task instance (dag, task, run, map index): every try of it loads the same study."""
    parts = [identity.dag_id, identity.task_id, identity.run_id]
    return "/".join(parts + ([str(identity.map_index)] if identity.map_index >= 0 else []))


def open_study(storage: optuna.storages.BaseStorage, name: str, settings: SearchSettings,
               space: SearchSpace) -> optuna.Study:
    """Create the study, or load the one an earlier try of the task created.

    Raises:
        SearchSpaceError: the stored study optimizes in the other direction.
    """
    try:
        trials_so_far = len(storage.get_all_trials(storage.get_study_id_from_name(name), deepcopy=False))
    except KeyError:
        trials_so_far = 0
    study = optuna.create_study(storage=storage, study_name=name, direction=settings.direction,
                                sampler=make_sampler(settings, space, trials_so_far),
                                pruner=make_pruner(settings), load_if_exists=True)
    if study.direction.name.lower() != settings.direction:
        raise SearchSpaceError(f"direction: study {name!r} already exists and was created to "
                               f"{study.direction.name.lower()} (got {settings.direction!r})")
    return study
