"""Budgets enforced where the work is created (issue 19 M4): a search's trials at once (``max_parallel``, a
recipe's ``parallel``) and in all, and the worker processes of one local job against this machine. Each
refusal names the field, the bound and the setting that moves it, before any job or process starts."""

from __future__ import annotations

import os
import runpy
import sys
import time

import psutil
import pytest
from airflow.sdk import DAG

from airflow_ml_provider.jobs.backends.base import JobSubmissionError
from airflow_ml_provider.jobs.backends.local.backend import WORKERS_PER_CPU, LocalBackend
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState
from airflow_ml_provider.operators.search import HyperparameterSearchOperator
from airflow_ml_provider.search.space import SearchSpaceError
from support import TEST_DAGS

TRIAL = {"framework": "generic", "num_workers": 1, "command": ["python", "-c", "print({{ params.x }})"]}
SPACE = {"x": {"type": "int", "low": 0, "high": 9}}


def _search(**settings) -> HyperparameterSearchOperator:
    with DAG("budgets", schedule=None):
        return HyperparameterSearchOperator(task_id="tune", trial=TRIAL, search_space=SPACE, search=settings)


@pytest.mark.parametrize(("settings", "message"), [
    ({"sampler": "random", "n_trials": 40, "max_parallel": 17},
     "tune: max_parallel: 17 trial jobs at once is more than the 16 allowed per search "
     "([ml_training] search_max_parallel)"),
    ({"sampler": "random", "n_trials": 10_001},
     "tune: n_trials: 10001 trials is more than the 10000 allowed per search ([ml_training] search_max_trials)"),
])
def test_a_search_over_the_default_budget_fails_when_its_dag_is_parsed(settings, message):
    with pytest.raises(SearchSpaceError) as refused:
        _search(**settings)
    assert str(refused.value) == message


def test_the_search_budget_is_configurable(monkeypatch):
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__SEARCH_MAX_PARALLEL", "2")
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__SEARCH_MAX_TRIALS", "8")
    _search(sampler="random", n_trials=8, max_parallel=2)  # at the bounds
    with pytest.raises(SearchSpaceError, match=r"max_parallel: 3 trial jobs at once is more than the 2 allowed"):
        _search(sampler="random", n_trials=8, max_parallel=3)
    with pytest.raises(SearchSpaceError, match=r"n_trials: the whole grid, 10 trials, is more than the 8 allowed"):
        _search(sampler="grid")  # a grid's default budget is its size
    _search(sampler="grid", n_trials=8)


@pytest.mark.integration
def test_a_templated_budget_is_refused_at_run_time_before_any_trial_job(airflow_db, tmp_path, monkeypatch, capfd):
    """max_parallel from the trigger conf (as a recipe or a UI user could set it): the task fails naming
    the bound, and the local backend never saw a trial job."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT", f'{{"conn_type": "ml_training", "extra": '
                                                           f'{{"local_root": "{tmp_path}"}}}}')
    dag = runpy.run_path(str(TEST_DAGS / "ml_budget_test_dags.py"))["search_budget"]
    dag_run = dag.test(run_conf={"parallel": 30, "trials": 30})
    with create_session() as session:
        run = session.query(DagRun).filter_by(dag_id=dag.dag_id, run_id=dag_run.run_id).one()
        assert {ti.task_id: str(ti.state) for ti in run.get_task_instances(session=session)} == {"tune": "failed"}
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())
    out, err = capfd.readouterr()
    assert ("tune: max_parallel: 30 trial jobs at once is more than the 16 allowed per search "
            "([ml_training] search_max_parallel)") in out + err


def _children() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


@pytest.mark.parametrize(("fields", "field"), [({"num_workers": 4096}, "num_workers"),
                                               ({"num_workers": 1, "min_workers": 1, "max_workers": 4096},
                                                "max_workers")])
def test_a_local_job_asking_for_more_workers_than_the_machine_allows_starts_nothing(tmp_path, fields, field):
    """4,096 workers started on 2 CPUs (issue 19 M4); now refused before any process or record."""
    backend = LocalBackend(tmp_path, image=sys.prefix)
    bound = WORKERS_PER_CPU * os.cpu_count()
    assert backend.max_workers == bound
    spec = TrainingJobSpec(framework="generic", command=["python", "-c", "pass"], **fields)
    before = _children()
    with pytest.raises(JobSubmissionError) as refused:
        backend.submit("aml-too-many", spec, {})
    assert str(refused.value).startswith(f"{field}: 4096 workers is more than the {bound} one local job may start")
    assert "[ml_training] local_max_workers" in str(refused.value)
    assert _children() == before and not backend.job_dir("aml-too-many").exists()


@pytest.mark.integration
def test_the_local_bound_is_configurable_and_a_job_at_the_bound_runs(tmp_path, monkeypatch):
    from airflow_ml_provider.hooks.training_backend import TrainingBackendHook

    monkeypatch.setenv("AIRFLOW__ML_TRAINING__LOCAL_MAX_WORKERS", "3")
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT",
                       f'{{"conn_type": "ml_training", "extra": {{"local_root": "{tmp_path}", '
                       f'"local_image": "{sys.prefix}"}}}}')
    backend = TrainingBackendHook().get_backend("local")
    assert backend.max_workers == 3
    with pytest.raises(JobSubmissionError, match=r"^num_workers: 4 workers is more than the 3 one local job"):
        backend.submit("aml-four", TrainingJobSpec(framework="generic", command=["python", "-c", "pass"],
                                                   num_workers=4), {})
    assert backend.submit("aml-three", TrainingJobSpec(framework="generic", command=["python", "-c", "pass"],
                                                       num_workers=3), {})
    deadline = time.monotonic() + 120
    while not (status := backend.status("aml-three")).state.is_terminal and time.monotonic() < deadline:
        time.sleep(0.5)
    assert status.state is JobState.SUCCEEDED, status
