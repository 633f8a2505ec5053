"""A search and its trials' bad output (issue 19, M2): one trial's bad line never fails the search, and a
search that does fail (sync loop or trigger) leaves no trial job running. Real jobs on the local backend."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from optuna.trial import TrialState

from airflow_ml_provider.jobs.backends.base import JobNotFound
from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.search.runner import TrialScheduler
from airflow_ml_provider.search.space import parse_settings, parse_space
from airflow_ml_provider.search.study import open_storage, open_study
from airflow_ml_provider.triggers.search import SearchTrigger
from support import TRAINING_IMAGE, processes_naming, wait_for

pytestmark = pytest.mark.integration

# "gate" waits for a file the test writes, then reports; "sleep" runs until it is stopped. The gate lies in
# the local root's data folder (<tmp>/ml/data), the one place of the root that a job's sandbox shows.
_TRIAL = """
import json, os, sys, time
mode, root = sys.argv[1], sys.argv[2]
if mode == "sleep":
    time.sleep(600)
while not os.path.exists(os.path.join(root, "ml", "data", "gate")):
    time.sleep(0.1)
print(json.dumps({"event": "result", "auc": 0.5}), flush=True)
"""
SPACE = {"mode": ["gate", "sleep"]}


def _spec(root: Path) -> dict:
    return {"framework": "generic", "num_workers": 1,
            "command": ["python", "-c", _TRIAL, "{{ params.mode }}", str(root)]}


def _both_running(study, backend: LocalBackend) -> bool:
    running = [t for t in study.get_trials(deepcopy=False) if t.state is TrialState.RUNNING
               and "job_name" in t.user_attrs]
    return len(running) == 2 and all(_job_state(backend, t.user_attrs["job_name"]) == "RUNNING" for t in running)


def _job_state(backend: LocalBackend, name: str) -> str | None:
    """None for a job not there yet: a trial names its job just before submitting it."""
    try:
        return backend.status(name).state.value
    except JobNotFound:
        return None


def _fail_mid_search(root: Path, study, backend: LocalBackend, search: Callable[[], None]) -> tuple[bool, str, list]:
    """Run ``search`` on a thread until both trials' jobs run; then the study's storage fails (its journal
    becomes a directory) and the "gate" trial finishes, so the search's next write raises while the
    "sleep" trial's job still runs. Returns whether the thread still runs, then the "sleep" job's state
    and the trials' processes left. Whatever the outcome, no job of the test outlives it."""
    journal, gate = root / "optuna.journal", root / "ml" / "data" / "gate"
    gate.parent.mkdir(parents=True)  # before any job starts: a sandbox shows the data folder if it exists
    thread = threading.Thread(target=search)
    thread.start()
    try:
        wait_for(lambda: _both_running(study, backend), what="both trials' jobs running")
        sleeping = next(t.user_attrs["job_name"] for t in study.get_trials(deepcopy=False)
                        if t.params["mode"] == "sleep")
        shutil.move(journal, root / "journal.saved")
        journal.mkdir()
        gate.touch()
        thread.join(timeout=120)
        return thread.is_alive(), backend.status(sleeping).state.value, processes_naming(root)
    finally:
        gate.touch()
        for job in (root / "ml" / "jobs").glob("*"):
            backend.cancel(job.name)


def test_a_search_whose_loop_fails_cancels_every_running_trial_job(tmp_path):
    journal = tmp_path / "optuna.journal"
    space, settings = parse_space(SPACE), parse_settings(sampler="grid", max_parallel=2, pruner="none",
                                                         poll_interval=0.2)
    study = open_study(open_storage(f"journal://{journal}"), "d/search/r", settings, space)
    backend = LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=5)
    search = TrialScheduler(backend, study, space, settings, lambda name: TrainingJobSpec(**_spec(tmp_path)),
                            JobIdentity("d", "search", "r"))
    errors: list[BaseException] = []

    def loop():
        try:
            search.run()
        except BaseException as exc:  # noqa: BLE001 - what the operator's task would fail with
            errors.append(exc)

    alive, state, leftovers = _fail_mid_search(tmp_path, study, backend, loop)
    assert not alive
    assert errors and isinstance(errors[0], OSError), errors  # the task fails with the storage's error
    assert state == "CANCELLED"
    assert leftovers == []


def test_a_search_trigger_that_fails_cancels_every_running_trial_job(tmp_path, monkeypatch):
    extra = {"backend": "local", "local_root": str(tmp_path / "ml"), "local_image": str(TRAINING_IMAGE)}
    monkeypatch.setenv("AIRFLOW_CONN_ML_SEARCH_FAIL", json.dumps({"conn_type": "ml_training", "extra": extra}))
    journal = tmp_path / "optuna.journal"
    settings = parse_settings(sampler="grid", max_parallel=2, pruner="none", poll_interval=0.2)
    study = open_study(open_storage(f"journal://{journal}"), "d/search/r", settings, parse_space(SPACE))
    trigger = SearchTrigger("d/search/r", f"journal://{journal}", settings.model_dump(mode="json"), SPACE,
                            _spec(tmp_path), {"dag_id": "d", "task_id": "search", "run_id": "r"}, "local",
                            "ml_search_fail")
    backend = LocalBackend(tmp_path / "ml")
    events: list[dict] = []

    async def first_event():
        async for event in trigger.run():
            events.append(event.payload)
            return

    alive, state, leftovers = _fail_mid_search(tmp_path, study, backend, lambda: asyncio.run(first_event()))
    assert not alive
    assert events and events[0]["status"] == "error", events
    assert state == "CANCELLED"
    assert leftovers == []


def test_one_trials_bad_lines_never_fail_the_search(run_dag, capfd):
    """Each trial prints a line nested 2,000 deep and the objective at steps -1 and 10**30 (Optuna raised
    on -1 and failed the search): sync and deferred, every trial completes with its own objective."""
    result = run_dag("ml_test_search_hostile_line")
    assert result.task_states == {"search": "success", "search_deferred": "success"}
    for task in ("search", "search_deferred"):
        trials = result.xcom[task]["trials"]
        assert [(t["state"], t["value"]) for t in trials] == [("COMPLETE", t["params"]["x"]) for t in trials]
        assert sorted(t["params"]["x"] for t in trials) == [0.2, 0.4, 0.6]
    assert "step -1 is not an integer 0 <= step < 2**63" in capfd.readouterr().out
