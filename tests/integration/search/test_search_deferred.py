"""The deferrable search: the trigger drives ask/tell and the trials' jobs, no worker slot is held, and
a trigger killed mid-search and rebuilt from its arguments loses no trial and reruns none."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from optuna.trial import TrialState

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.labels import DAG_ID as DAG_ID_LABEL
from airflow_ml_provider.search.space import parse_settings, parse_space
from airflow_ml_provider.search.study import open_storage, open_study
from airflow_ml_provider.triggers.search import SearchTrigger
from support import REPO, TRAINING_IMAGE, wait_for

pytestmark = pytest.mark.integration
DAG_ID = "ml_test_search_deferred"


def _running_trial_jobs(jobs: Path, dag_id: str) -> list[Path]:
    """This DAG's trial jobs that have started and not ended (from the local backend's own records)."""
    running = []
    for job_dir in jobs.glob("aml-search-trial-*"):
        try:
            labels = json.loads((job_dir / "job.json").read_text())["labels"]
        except (OSError, ValueError):
            continue
        if labels.get(DAG_ID_LABEL) == dag_id and not (job_dir / "status.json").exists():
            running.append(job_dir)
    return running


def test_a_deferred_search_runs_its_trials_in_the_trigger_holding_no_worker_slot(run_dag):
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session

    jobs = Path(os.environ["AIRFLOW_HOME"]) / "ml" / "jobs"
    seen: list[tuple[str, str | None]] = []  # (task state, trigger class) whenever a trial job was running
    stop = threading.Event()

    def probe():
        while not stop.is_set():
            if _running_trial_jobs(jobs, DAG_ID):
                with create_session() as session:
                    for ti in session.query(TaskInstance).filter_by(dag_id=DAG_ID, task_id="search"):
                        if ti.state is not None and ti.end_date is None:
                            trigger = ti.trigger_id and session.get(Trigger, ti.trigger_id)
                            seen.append((str(ti.state), trigger.classpath if trigger else None))
            stop.wait(0.1)

    watcher = threading.Thread(target=probe, daemon=True)
    watcher.start()
    try:
        result = run_dag(DAG_ID)
    finally:
        stop.set()
        watcher.join()

    assert result.state == "success", result.task_states
    out = result.xcom["search"]
    assert [t["state"] for t in out["trials"]] == ["COMPLETE"] * 4
    for trial in out["trials"]:  # the objective each trial's job printed for its own x
        assert trial["value"] == round(1 - (trial["params"]["x"] - 0.3) ** 2, 6)
    assert out["best_value"] == max(t["value"] for t in out["trials"])
    assert seen, "the probe never saw a trial job running"
    assert all(state != "running" for state, _ in seen), f"the task held a worker slot while trials ran: {seen}"
    assert {cls for _, cls in seen} == {"airflow_ml_provider.triggers.search.SearchTrigger"}, seen


_SLOW = ("import json, sys, time; time.sleep(1.5); x = float(sys.argv[1]); "
         "print(json.dumps({'event': 'result', 'score': x}))")


def test_a_trigger_killed_mid_search_and_restarted_loses_no_trial_and_reruns_none(tmp_path, monkeypatch):
    extra = {"backend": "local", "local_root": str(tmp_path / "ml"), "local_image": str(TRAINING_IMAGE)}
    monkeypatch.setenv("AIRFLOW_CONN_ML_SEARCH", json.dumps({"conn_type": "ml_training", "extra": extra}))
    space = {"x": {"type": "float", "low": 0.0, "high": 1.0}}
    settings = parse_settings(sampler="random", n_trials=6, max_parallel=2, seed=5, pruner="none",
                              objective_metric="score", poll_interval=0.2)
    storage = f"journal://{tmp_path / 'optuna.journal'}"
    study = open_study(open_storage(storage), "d/search/r", settings, parse_space(space))
    trigger = SearchTrigger(
        "d/search/r", storage, settings.model_dump(mode="json"), space,
        {"framework": "generic", "num_workers": 1, "command": ["python", "-c", _SLOW, "{{ params.x }}"]},
        {"dag_id": "d", "task_id": "search", "run_id": "r"}, "local", "ml_search",
    )
    _, kwargs = trigger.serialize()
    child = subprocess.Popen([sys.executable, str(Path(__file__).with_name("trigger_child.py")), json.dumps(kwargs)],
                             cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    backend = LocalBackend(tmp_path / "ml")

    def mid_search():
        trials = study.get_trials(deepcopy=False)
        done = [t for t in trials if t.state is TrialState.COMPLETE]
        running = [t for t in trials if t.state is TrialState.RUNNING and "job_name" in t.user_attrs
                   and (backend.job_dir(t.user_attrs["job_name"]) / "launcher.json").exists()]
        return (done, running) if done and running else None

    try:
        wait_for(mid_search, timeout=180, what="a completed trial and a running one")
    finally:
        child.send_signal(signal.SIGKILL)  # the triggerer dies; the running trials' jobs go on
        child.wait()
    done, running = mid_search() or ([], [])
    assert done and running
    uids = {t.number: json.loads((backend.job_dir(t.user_attrs["job_name"]) / "job.json").read_text())["uid"]
            for t in done + running}
    values = {t.number: t.value for t in done}

    restarted = SearchTrigger(**kwargs)  # what another triggerer builds from the stored arguments

    async def first_event():
        async for event in restarted.run():
            return event.payload

    assert asyncio.run(first_event()) == {"status": "done", "study_name": "d/search/r"}
    trials = study.get_trials(deepcopy=False)
    assert [t.number for t in trials] == list(range(6)), "the budget is 6 trials, no more, no fewer"
    assert all(t.state is TrialState.COMPLETE for t in trials), [t.state for t in trials]
    for number, value in values.items():
        assert trials[number].value == value  # finished before the kill: kept, not run again
    for number, uid in uids.items():
        job_dir = backend.job_dir(trials[number].user_attrs["job_name"])
        assert json.loads((job_dir / "job.json").read_text())["uid"] == uid, f"trial {number}'s job was resubmitted"
        assert not job_dir.with_name(job_dir.name + ".1").exists(), f"trial {number}'s job was archived and rerun"
    for trial in trials:  # each value is what that trial's own job printed
        assert trial.value == pytest.approx(trial.params["x"], abs=1e-3)
