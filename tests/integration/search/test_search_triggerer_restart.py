"""A deferred search in a real Airflow deployment (tests/airflow_stack.py): the task is DEFERRED, holding
no worker slot, while its trials run; a triggerer SIGKILLed and started again mid-search keeps every
finished trial, re-attaches to the running trials' jobs and reruns none."""

from __future__ import annotations

import json
import signal
import sys
import textwrap
import time

import pytest
from airflow_stack import AirflowStack, ApiError
from optuna.trial import TrialState

from airflow_ml_provider.jobs.backends.base import JobNotFound
from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.search.study import open_storage

pytestmark = pytest.mark.integration
DAG_ID = "ml_test_search_triggerer_restart"
_TRIAL = ("import json, sys, time; time.sleep(3); "
          "print(json.dumps({'event': 'result', 'score': float(sys.argv[1])}))")
_DAG = textwrap.dedent(f"""
    from airflow.sdk import DAG
    from airflow_ml_provider.operators.search import HyperparameterSearchOperator

    with DAG({DAG_ID!r}, schedule=None, catchup=False):
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
    (dags / "search_dag.py").write_text(_DAG)
    extra = {"backend": "local", "local_root": str(home / "ml"), "local_image": sys.prefix}
    env = {"AIRFLOW_CONN_ML_TRAINING_DEFAULT": json.dumps({"conn_type": "ml_training", "extra": extra}),
           "AIRFLOW__ML_TRAINING__SEARCH_STORAGE_URL": f"journal://{home / 'search.journal'}"}
    with AirflowStack(home, dags, env=env) as running:
        running.wait_for_dag(DAG_ID)
        yield running


def test_the_search_defers_and_survives_a_triggerer_crash(stack):
    backend = LocalBackend(stack.home / "ml")
    storage = open_storage(f"journal://{stack.home / 'search.journal'}")
    run_id = stack.trigger_dag(DAG_ID)
    study = f"{DAG_ID}/search/{run_id}"

    def trials():
        try:
            return storage.get_all_trials(storage.get_study_id_from_name(study), deepcopy=False)
        except KeyError:  # the task has not created the study yet
            return []

    def task_state() -> str | None:
        try:
            return stack.task_instances(DAG_ID, run_id)[0]["state"]
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

    stack.restart("triggerer", sig=signal.SIGKILL)  # a crash mid-search; the running trials' jobs go on
    assert stack.wait_for_run(DAG_ID, run_id, timeout=300) == "success", stack.log_tails()

    assert states == {"deferred"}, f"the task held a worker slot while trials ran: {states}"
    out = stack.xcom(DAG_ID, run_id, "search")
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
