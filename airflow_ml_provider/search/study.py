"""Where a search's state lives (an Optuna storage of its own) and the study a restarted task loads again.

The storage never derives from Airflow's metadata database (its URL holds that database's password):
by default it is a journal file under ``$AIRFLOW_HOME/ml/search`` (no server, no credentials, appends
under a file lock, so several searches can share it); a configured URL may name another journal file
(``journal:///path``) or any SQLAlchemy database Optuna supports. URLs are shown only with the
password masked. Optuna is imported only when a search runs, never when a DAG is parsed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.search.space import (
    SearchSettings,
    SearchSpace,
    SearchSpaceError,
    make_pruner,
    make_sampler,
    parse_settings,
    parse_space,
)

if TYPE_CHECKING:
    import optuna

JOURNAL_SCHEME = "journal://"
# The objective's metric, kept in the study (its direction is the study's own): the training view names it from
# what the search recorded, which a recipe search's serialized task (no template fields) does not carry.
OBJECTIVE_ATTR = "objective_metric"


def default_journal() -> Path:
    return Path(os.environ.get("AIRFLOW_HOME", "~/airflow")).expanduser() / "ml" / "search" / "optuna.journal"


def masked(url: str) -> str:
    """The URL as it may appear in logs and errors: any password replaced by ``***``."""
    if url.startswith(JOURNAL_SCHEME) or "://" not in url:
        return url
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 (an unparsable URL is shown as its scheme only, never in full)
        return url.split("://", 1)[0] + "://***"


def open_storage(url: str | None = None) -> optuna.storages.BaseStorage:
    """The storage at ``url`` (see the module docstring); ``None``: the default journal file.
    RDB storages run without heartbeat: a trial whose process died stays RUNNING, and the next session
    re-attaches to its job instead of failing it. A new database opened by several processes at once
    (a search and its restarted task, mapped searches sharing one URL) is opened by all of them:
    see ``_rdb_storage``.

    Raises:
        ValueError: the storage cannot be opened; the message shows the URL masked.
    """
    from optuna.storages.journal import JournalStorage

    from airflow_ml_provider.search.journal import GroupCommitJournalFile

    if url is None or url.startswith(JOURNAL_SCHEME) or "://" not in url:
        path = Path(url.removeprefix(JOURNAL_SCHEME)) if url else default_journal()
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(GroupCommitJournalFile(str(path)))
    try:
        return _rdb_storage(url)
    except Exception as exc:  # noqa: BLE001 (drivers put the URL, password included, in their messages)
        message = str(exc)
        password = _password(url)
        if password:
            message = message.replace(password, "***")
        raise ValueError(f"search storage {masked(url)}: {type(exc).__name__}: {message}") from None


def _rdb_storage(url: str, attempts: int = 5) -> optuna.storages.RDBStorage:
    """Optuna creates a new database's tables and then its version row with no lock (optuna#1092): of
    several processes opening it at once, the losers fail with "table ... already exists" or a duplicate
    version row. By then a winner is creating that schema, so a loser opens the database again (after
    0.1, 0.2, ... s); any other error is the storage's own and is raised at once."""
    import optuna
    from sqlalchemy.exc import IntegrityError, OperationalError

    for attempt in range(1, attempts):
        try:
            return optuna.storages.RDBStorage(url)
        except (IntegrityError, OperationalError) as exc:
            if not (isinstance(exc, IntegrityError) or "already exists" in str(exc)):
                raise
            time.sleep(0.1 * attempt)
    return optuna.storages.RDBStorage(url)


def _password(url: str) -> str | None:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).password
    except Exception:  # noqa: BLE001
        return None


def study_name(identity: JobIdentity) -> str:
    """One study per task instance (dag, task, run, map index): every try of it loads the same study."""
    parts = [identity.dag_id, identity.task_id, identity.run_id]
    return "/".join(parts + ([str(identity.map_index)] if identity.map_index >= 0 else []))


def open_study(storage: optuna.storages.BaseStorage, name: str, settings: SearchSettings,
               space: SearchSpace) -> optuna.Study:
    """Create the study, or load the one an earlier try of the task created; the objective's metric is recorded
    as its user attr ``OBJECTIVE_ATTR``.

    Raises:
        SearchSpaceError: the stored study optimizes in the other direction.
    """
    import optuna

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
    if study.user_attrs.get(OBJECTIVE_ATTR) != settings.objective_metric:  # once: a journal keeps every write
        study.set_user_attr(OBJECTIVE_ATTR, settings.objective_metric)
    return study


@dataclass(frozen=True)
class SearchSetup:
    """A search's validated space and settings and where its study lives: set up here for the operator
    (before it defers and when it resumes) and for the trigger alike.

    Args:
        space, settings: validated (:meth:`parse`).
        storage_url: the Optuna storage (see the module docstring; the default journal file when not given).
    """

    space: SearchSpace
    settings: SearchSettings
    storage_url: str

    @classmethod
    def parse(cls, search_space: dict, settings: SearchSettings | dict, storage_url: str | None = None) -> SearchSetup:
        """Raises SearchSpaceError naming the parameter or setting."""
        if not isinstance(settings, SearchSettings):
            settings = parse_settings(**settings)
        return cls(parse_space(search_space), settings, storage_url or f"{JOURNAL_SCHEME}{default_journal()}")

    def study(self, name: str) -> optuna.Study:
        """The study ``name`` in the storage, created or loaded (see :func:`open_study`)."""
        return open_study(open_storage(self.storage_url), name, self.settings, self.space)
