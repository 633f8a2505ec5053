"""A real triggerer process killed (SIGKILL) and started again, in one real Airflow deployment
(tests/airflow_stack.py) that both tests share:

- while it streams a deferred job's log: no line is lost or shown twice unlabelled (the batch the killed
  triggerer was showing may show again, labelled "(again)"), and the metrics and the last checkpoint come
  through intact;
- mid-search: the search task is DEFERRED, holding no worker slot, while its trials run; the restarted
  triggerer keeps every finished trial, re-attaches to the running trials' jobs and reruns none."""

from __future__ import annotations

import json
import re
import signal
import sys
import textwrap
import time
import urllib.parse
from html import escape
from pathlib import Path

import pytest
from airflow_stack import AirflowStack, ApiError
from optuna.trial import TrialState

from airflow_ml_provider.jobs.backends.base import JobNotFound
from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.plugins.training_view import page, trial_href
from airflow_ml_provider.search.study import open_storage

pytestmark = pytest.mark.integration

LINES = 60
HOLD_AT = 30  # the job waits here until the test has killed the triggerer: under load it could end first
_JOB = textwrap.dedent(f"""
    import json, os, sys, time
    root, release = os.environ["AIRFLOW_ML_CHECKPOINT_DIR"], sys.argv[1]
    for i in range({LINES}):
        while i == {HOLD_AT} and not os.path.exists(release):
            time.sleep(0.2)
        print("line", i, flush=True)
        if i % 10 == 9:
            print(json.dumps({{"event": "metrics", "step": i + 1, "loss": 1 / (i + 1)}}), flush=True)
            print(json.dumps({{"event": "checkpoint", "step": i + 1, "path": f"{{root}}/ckpt-{{i + 1}}"}}), flush=True)
        time.sleep(0.5)
""")
_DAG = """
    from airflow.sdk import DAG
    from airflow_ml_provider.operators.training import TrainingJobOperator

    with DAG("ml_test_triggerer_restart", schedule=None, catchup=False):
        TrainingJobOperator(task_id="train", command=["python", "-c", {job!r}, {release!r}], num_workers=1,
                            deferrable=True, follow={{"poll_interval": 0.5}})
"""

SEARCH_DAG_ID = "ml_test_search_triggerer_restart"
_TRIAL = ("import json, sys, time; time.sleep(3); "
          "print(json.dumps({'event': 'result', 'score': float(sys.argv[1])}))")
_SEARCH_DAG = textwrap.dedent(f"""
    from airflow.sdk import DAG
    from airflow_ml_provider.operators.search import HyperparameterSearchOperator

    with DAG({SEARCH_DAG_ID!r}, schedule=None, catchup=False):
        HyperparameterSearchOperator(
            task_id="search", deferrable=True, track_mlflow=False, retries=0,
            search={{"sampler": "random", "seed": 2, "n_trials": 6, "max_parallel": 2, "objective_metric": "score",
                    "pruner": "none", "poll_interval": 0.3}},
            trial={{"framework": "generic", "num_workers": 1, "command": ["python", "-c", {_TRIAL!r},
                                                                         "{{{{ params.x }}}}"]}},
            search_space={{"x": {{"type": "float", "low": 0.0, "high": 1.0}}}},
        )
""")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    home, dags = tmp_path_factory.mktemp("airflow"), tmp_path_factory.mktemp("dags")
    release_file(home).parent.mkdir(parents=True)  # shown to the job only if it exists when the job starts
    (dags / "restart_dag.py").write_text(textwrap.dedent(_DAG.format(job=_JOB, release=str(release_file(home)))))
    (dags / "search_dag.py").write_text(_SEARCH_DAG)
    extra = {"backend": "local", "local_root": str(home / "ml"), "local_image": sys.prefix}
    env = {"AIRFLOW_CONN_ML_TRAINING_DEFAULT": json.dumps({"conn_type": "ml_training", "extra": extra}),
           "AIRFLOW__ML_TRAINING__SEARCH_STORAGE_URL": f"journal://{home / 'search.journal'}"}
    with AirflowStack(home, dags, env=env) as running:
        running.wait_for_dag("ml_test_triggerer_restart")
        running.wait_for_dag(SEARCH_DAG_ID)
        yield running


def release_file(home: Path) -> Path:
    """Created by the test once the triggerer is killed; under ``<local_root>/data``, which every job's
    sandbox shows (``$AIRFLOW_HOME`` itself is hidden from jobs)."""
    return home / "ml" / "data" / "release"


def streamed(stack: AirflowStack, run_id: str, again: bool = False) -> list[int]:
    """The job's line numbers in the task log: those shown once, or (``again``) those labelled as shown again."""
    try:
        entries = stack.task_log("ml_test_triggerer_restart", run_id, "train")
    except ApiError as exc:  # the run's task instance is not created yet
        if exc.status != 404:
            raise
        return []
    pattern = (r"^\(again\) " if again else r"^") + r"\[rank 0\] line (\d+)$"
    return [int(m[1]) for entry in entries if (m := re.search(pattern, str(entry.get("event"))))]


def lost(stack: AirflowStack, run_id: str) -> str:
    """Where the job's last line went instead, for a failure to say: the task log files of the run and the
    triggerers' own log (which takes a trigger's lines its supervisor no longer has a task log file for)."""
    last = f"[rank 0] line {LINES - 1}"
    files = sorted(stack.home.glob(f"logs/dag_id=ml_test_triggerer_restart/run_id={run_id}/task_id=train/*"))
    found = [f"{path.name}: {last in path.read_text(errors='replace')}" for path in files]
    return (f"shown once {streamed(stack, run_id)[-3:]}, again {streamed(stack, run_id, again=True)[-3:]}; "
            f"in the task log files {found}; in triggerer.log "
            f"{last in (stack.home / 'triggerer.log').read_text(errors='replace')}")


def test_a_killed_triggerer_loses_no_line_and_repeats_none_unlabelled(stack):
    run_id = stack.trigger_dag("ml_test_triggerer_restart")
    deadline = time.monotonic() + 240
    while len(streamed(stack, run_id)) < 12:  # deferred, and well into the job
        assert time.monotonic() < deadline, stack.log_tails()
        time.sleep(1)
    [train] = stack.task_instances("ml_test_triggerer_restart", run_id)
    assert train["state"] == "deferred", "the job holds at line 30, so its trigger is still streaming"
    stack.restart("triggerer", sig=signal.SIGKILL)  # a crash: nothing is flushed or handed over
    release_file(stack.home).touch()
    assert stack.wait_for_run("ml_test_triggerer_restart", run_id, timeout=300) == "success", stack.log_tails()

    deadline = time.monotonic() + 120  # the new triggerer's part of the task log can be written after the run ends
    while LINES - 1 not in streamed(stack, run_id) + streamed(stack, run_id, again=True):
        assert time.monotonic() < deadline, f"the job's last line never reached the task log; {lost(stack, run_id)}"
        time.sleep(1)
    lines, again = streamed(stack, run_id), streamed(stack, run_id, again=True)
    assert lines == sorted(set(lines)), "no line shown twice unlabelled, none out of order"
    assert sorted(set(lines) | set(again)) == list(range(LINES)), "no line lost across the restart"
    assert not again or again == list(range(again[0], again[0] + len(again))), "one batch shown again, in order"
    entries = " ".join(str(e.get("event")) for e in stack.task_log("ml_test_triggerer_restart", run_id, "train"))
    assert "Continuing after the last log line shown before a restart" in entries
    result = stack.xcom("ml_test_triggerer_restart", run_id, "train")
    assert result["state"] == "SUCCEEDED" and result["metrics"]["loss"] == pytest.approx(1 / LINES)
    state = stack.xcom("ml_test_triggerer_restart", run_id, "train", key="ml_follow_state")
    assert state["metrics"]["checkpoint"]["path"].endswith(f"/ckpt-{LINES}")
    assert [step for step, _ in state["metrics"]["metrics"]["loss"]["series"]] == list(range(10, LINES + 1, 10))


def test_the_search_defers_and_survives_a_triggerer_crash(stack):
    backend = LocalBackend(stack.home / "ml")
    storage = open_storage(f"journal://{stack.home / 'search.journal'}")
    run_id = stack.trigger_dag(SEARCH_DAG_ID)
    study = f"{SEARCH_DAG_ID}/search/{run_id}"

    def trials():
        try:
            return storage.get_all_trials(storage.get_study_id_from_name(study), deepcopy=False)
        except KeyError:  # the task has not created the study yet
            return []

    def task_state() -> str | None:
        try:
            return stack.task_instances(SEARCH_DAG_ID, run_id)[0]["state"]
        except (ApiError, IndexError):
            return None

    def job_running(name: str | None) -> bool:
        try:  # the trial names its job just before submitting it
            return name is not None and backend.status(name).state.value == "RUNNING"
        except JobNotFound:
            return False

    states = set()  # the task's states seen while a trial's job was running
    deadline = time.monotonic() + 300
    while True:
        assert time.monotonic() < deadline, stack.log_tails()
        current = trials()
        done = [t for t in current if t.state is TrialState.COMPLETE]
        running = [t for t in current if t.state is TrialState.RUNNING and job_running(t.user_attrs.get("job_name"))]
        if running and (state := task_state()) is not None:
            states.add(state)
        if done and running:
            break
        time.sleep(0.3)
    uids = {t.number: json.loads((backend.job_dir(t.user_attrs["job_name"]) / "job.json").read_text())["uid"]
            for t in done + running}
    values = {t.number: t.value for t in done}
    # the training view of the running search, through the plugin's API and page (the study read as it stands)
    path = f"/ml-training/api/ti/{SEARCH_DAG_ID}/{urllib.parse.quote(run_id, safe='')}/search"
    live = stack._request("GET", path, headers={"Authorization": f"Bearer {stack.token()}"})
    assert live["result"] is None and live["ti"]["state"] == "deferred", live["ti"]
    listed = {t["number"]: t for t in live["search"]["trials"]}
    assert {t.number for t in done} <= set(listed) and any(t["state"] == "RUNNING" for t in listed.values()), listed
    best = max(done, key=lambda t: t.value)  # the search maximizes (SearchSettings' default direction)
    assert live["search"]["best_trial"] == best.number and listed[best.number]["job_name"], live["search"]
    html = page(live)  # the page the plugin serves of that data
    link = escape(trial_href(live["ti"], best.number), quote=True)  # the best trial's row links to its page
    assert f"<tr class='best'><td><a href='{link}'>{best.number}</a> (best)</td>" in html and "<td>RUNNING</td>" in html

    stack.restart("triggerer", sig=signal.SIGKILL)  # a crash mid-search; the running trials' jobs go on
    assert stack.wait_for_run(SEARCH_DAG_ID, run_id, timeout=300) == "success", stack.log_tails()

    assert states == {"deferred"}, f"the task held a worker slot while trials ran: {states}"
    out = stack.xcom(SEARCH_DAG_ID, run_id, "search")
    assert [t["number"] for t in out["trials"]] == list(range(6)) and out["n_complete"] == 6, out["trials"]
    final = {t["number"]: t for t in out["trials"]}
    for number, value in values.items():
        assert final[number]["value"] == value  # finished before the crash: kept, not run again
    for number, uid in uids.items():
        job_dir = backend.job_dir(final[number]["job_name"])
        assert json.loads((job_dir / "job.json").read_text())["uid"] == uid, f"trial {number}'s job was resubmitted"
        assert not job_dir.with_name(job_dir.name + ".1").exists(), f"trial {number}'s job was archived and rerun"
    for trial in out["trials"]:  # each value is what that trial's own job printed
        assert trial["value"] == pytest.approx(trial["params"]["x"])
    for number in uids:  # each trial's page: its job's view, saved at its end (after the crash: by the new triggerer)
        shown = stack._request("GET", f"/ml-training/api/trial/{SEARCH_DAG_ID}/{urllib.parse.quote(run_id, safe='')}"
                               f"/search/{number}", headers={"Authorization": f"Bearer {stack.token()}"})
        assert shown["view"]["state"] == "SUCCEEDED" and shown["view"]["job"] == final[number]["job_name"], shown
