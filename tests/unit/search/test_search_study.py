"""Where the study lives (a storage of its own, never the metadata database), what it is called, and
that a second session loads it again."""

from __future__ import annotations

import optuna
import pytest
from optuna.storages import JournalStorage, RDBStorage

from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.search.space import SearchSpaceError, parse_settings, parse_space
from airflow_ml_provider.search.study import masked, open_storage, open_study, study_name

SPACE = parse_space({"x": {"type": "float", "low": 0.0, "high": 1.0}})


def test_by_default_the_study_is_a_journal_file_under_airflow_home(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    storage = open_storage(None)
    assert isinstance(storage, JournalStorage)
    open_study(storage, "dag/search/run", parse_settings(n_trials=2), SPACE)
    assert (tmp_path / "ml" / "search" / "optuna.journal").stat().st_size > 0


def test_a_configured_url_names_a_journal_file_or_a_database(tmp_path):
    assert isinstance(open_storage(f"journal://{tmp_path / 'a.journal'}"), JournalStorage)
    assert isinstance(open_storage(str(tmp_path / "b.journal")), JournalStorage)
    assert isinstance(open_storage(f"sqlite:///{tmp_path / 'optuna.db'}"), RDBStorage)


def test_urls_are_shown_with_the_password_masked():
    assert masked("postgresql+psycopg2://optuna:s3cret@db:5432/optuna") == "postgresql+psycopg2://optuna:***@db:5432/optuna"
    assert masked("journal:///var/optuna.journal") == "journal:///var/optuna.journal"


def test_a_storage_that_cannot_be_opened_fails_without_showing_its_password():
    with pytest.raises(ValueError) as raised:
        open_storage("postgresql://optuna:s3cret-pw@127.0.0.1:1/optuna")
    assert str(raised.value).startswith("search storage postgresql://optuna:***@127.0.0.1:1/optuna: ")
    assert "s3cret-pw" not in str(raised.value)


def test_the_study_name_identifies_the_task_instance():
    assert study_name(JobIdentity("dag", "search", "manual__1")) == "dag/search/manual__1"
    assert study_name(JobIdentity("dag", "search", "manual__1", map_index=2)) == "dag/search/manual__1/2"


@pytest.mark.parametrize("scheme", ["journal", "sqlite"])
def test_a_second_session_loads_the_same_study(tmp_path, scheme):
    url = f"journal://{tmp_path / 'optuna.journal'}" if scheme == "journal" else f"sqlite:///{tmp_path / 'optuna.db'}"
    settings = parse_settings(n_trials=4, seed=1)
    first = open_study(open_storage(url), "dag/search/run", settings, SPACE)
    trial = first.ask()
    first.tell(trial, SPACE.suggest(trial)["x"])

    again = open_study(open_storage(url), "dag/search/run", settings, SPACE)
    assert [(t.number, t.state) for t in again.trials] == [(0, optuna.trial.TrialState.COMPLETE)]
    with pytest.raises(SearchSpaceError, match="direction: study 'dag/search/run' already exists"):
        open_study(open_storage(url), "dag/search/run", parse_settings(n_trials=4, direction="minimize"), SPACE)


def test_the_study_records_its_objectives_metric_once(tmp_path):
    """The training view names the objective from the study (``OBJECTIVE_ATTR``): written when a session opens the
    study with another metric, not again by every later session (a journal keeps every write)."""
    from airflow_ml_provider.search.study import OBJECTIVE_ATTR

    journal = tmp_path / "search.journal"
    storage = open_storage(f"journal://{journal}")
    settings = parse_settings(n_trials=2, objective_metric="loss", direction="minimize")
    def writes() -> int:
        return journal.read_text().count(f'"{OBJECTIVE_ATTR}"')

    assert open_study(storage, "dag/search/run", settings, SPACE).user_attrs[OBJECTIVE_ATTR] == "loss"
    again = open_study(open_storage(f"journal://{journal}"), "dag/search/run", settings, SPACE)
    assert again.user_attrs[OBJECTIVE_ATTR] == "loss" and writes() == 1
    renamed = parse_settings(n_trials=2, objective_metric="log_loss", direction="minimize")
    assert open_study(open_storage(f"journal://{journal}"), "dag/search/run", renamed, SPACE).user_attrs[
        OBJECTIVE_ATTR] == "log_loss" and writes() == 2
