"""The search loop over real trial jobs on the local backend: parallelism, restart, pruning, failures."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
import search_setup
from optuna.trial import TrialState

from airflow_ml_provider.jobs.backends.base import JobNotFound
from airflow_ml_provider.jobs.backends.local.common import submission_lock
from airflow_ml_provider.jobs.drivers import replay
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import NEVER_LAUNCHED
from airflow_ml_provider.search.runner import summarize
from support import REPO, processes_naming, wait_for

pytestmark = pytest.mark.integration


def _max_overlap(job_dirs: list[Path]) -> int:
    """Most jobs alive at one instant, from the backend's own records on one clock (file times): when the
    job was submitted (job.json is written once, before its launcher starts) and when its final status
    was written. (The launcher's process start time is no use here: psutil derives it from a boot time
    rounded to the second.)"""
    events = []
    for job_dir in job_dirs:
        events.append(((job_dir / "job.json").stat().st_mtime, 1))
        events.append(((job_dir / "status.json").stat().st_mtime, -1))
    alive = peak = 0
    for _, change in sorted(events, key=lambda event: (event[0], event[1])):  # ends sort before starts
        alive += change
        peak = max(peak, alive)
    return peak


def test_trials_run_in_parallel_up_to_max_parallel_with_their_own_parameters(tmp_path):
    search = search_setup.scheduler(tmp_path, search_setup.lightgbm_template(tmp_path), search_setup.LIGHTGBM_SPACE,
                                    sampler="random", n_trials=4, max_parallel=2, seed=11, pruner="none")
    search.run()
    result = summarize(search.study)

    assert [t["state"] for t in result["trials"]] == ["COMPLETE"] * 4
    backend = search.backend
    job_dirs = [backend.job_dir(t["job_name"]) for t in result["trials"]]
    assert _max_overlap(job_dirs) == 2, "trials must run two at a time, never more"
    for trial in result["trials"]:
        command = json.loads((backend.job_dir(trial["job_name"]) / "job.json").read_text())["spec"]["command"]
        params = json.loads(command[command.index("--params-json") + 1])
        assert (params["learning_rate"], params["num_leaves"]) == (trial["params"]["learning_rate"],
                                                                  trial["params"]["num_leaves"])
        metrics = replay(backend.log_source(trial["job_name"])).tracker
        assert trial["value"] == metrics.result["auc"]  # the objective is the job's own final result
        assert search.study.trials[trial["number"]].intermediate_values == {
            step["step"]: step["auc"] for step in metrics.history()}
    assert result["best_value"] == max(t["value"] for t in result["trials"])
    assert Path(result["best_model_path"]).is_file()


def test_restart_keeps_finished_trials_and_reattaches_to_running_jobs(tmp_path):
    settings = {"sampler": "tpe", "n_trials": 4, "max_parallel": 2, "seed": 3, "pruner": "none"}
    child = subprocess.Popen(
        [sys.executable, str(Path(search_setup.__file__)), str(tmp_path), json.dumps(settings)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(Path(__file__).parent)])},
    )
    search = search_setup.scheduler(tmp_path, search_setup.lightgbm_template(tmp_path), search_setup.LIGHTGBM_SPACE,
                                    **settings)
    backend, study = search.backend, search.study

    def interrupted_mid_search():
        trials = study.get_trials(deepcopy=False)
        done = [t for t in trials if t.state is TrialState.COMPLETE]
        running = [t for t in trials if t.state is TrialState.RUNNING and t.user_attrs.get("job_name")
                   and (backend.job_dir(t.user_attrs["job_name"]) / "launcher.json").exists()]
        return (done, running) if done and running else None

    def crash_mid_search():
        """Kill the search once a trial completed and another's job runs: checked again with the search stopped
        (SIGSTOP), so that the state the crash leaves is the one checked (the search may otherwise finish the
        running trial or start submitting the next one in between); else it goes on."""
        if interrupted_mid_search() is None:
            return None
        child.send_signal(signal.SIGSTOP)
        wait_for(lambda: psutil.Process(child.pid).status() == psutil.STATUS_STOPPED, what="the search to stop")
        if (state := interrupted_mid_search()) is not None:
            child.send_signal(signal.SIGKILL)
            return state
        child.send_signal(signal.SIGCONT)
        return None

    try:
        done, running = wait_for(crash_mid_search, timeout=180, what="a completed trial and a running one")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    uids = {t.number: json.loads((backend.job_dir(t.user_attrs["job_name"]) / "job.json").read_text())["uid"]
            for t in done + running}
    values = {t.number: t.value for t in done}

    search = search_setup.scheduler(tmp_path, search_setup.lightgbm_template(tmp_path),
                                    search_setup.LIGHTGBM_SPACE, **settings)
    search.run()

    trials = search.study.get_trials(deepcopy=False)
    assert len(trials) == 4 and all(t.state is TrialState.COMPLETE for t in trials), [t.state for t in trials]
    for number, value in values.items():
        assert trials[number].value == value  # a finished trial is not run again
    for number, uid in uids.items():
        job_dir = backend.job_dir(trials[number].user_attrs["job_name"])
        assert json.loads((job_dir / "job.json").read_text())["uid"] == uid, f"trial {number}'s job was resubmitted"
        assert not job_dir.with_name(job_dir.name + ".1").exists(), f"trial {number}'s job was archived and rerun"
    assert len({json.dumps(t.params, sort_keys=True) for t in trials}) == 4


_KILLED_MID_SUBMIT = """
import os, signal, sys
import search_setup
from airflow_ml_provider.jobs.backends.local import backend as local
from airflow_ml_provider.jobs.spec import TrainingJobSpec

real_write = local.write_json  # SIGKILL of the search the moment its first trial's job record is written
local.write_json = lambda path, data: (real_write(path, data), path.name == "job.json" and os.kill(os.getpid(), 9))
spec = TrainingJobSpec(framework="generic", num_workers=1, command=["python", "-c", sys.argv[2], "{{ params.x }}"])
search_setup.scheduler(__import__("pathlib").Path(sys.argv[1]), lambda name: spec, {"x": [1, 2]}, sampler="grid",
                       objective_metric="score").run()
"""
_SCORE = "import json, sys; print(json.dumps({'event': 'result', 'score': int(sys.argv[1])}))"


def _restarted_after_a_kill_mid_submit(tmp_path):
    """The search again, after its first session was SIGKILLed mid-submit of its first trial's job; and
    that interrupted trial."""
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_SUBMIT, str(tmp_path), _SCORE], cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(Path(__file__).parent)])},
    )
    assert child.returncode == -signal.SIGKILL
    spec = TrainingJobSpec(framework="generic", num_workers=1, command=["python", "-c", _SCORE, "{{ params.x }}"])
    search = search_setup.scheduler(tmp_path, lambda name: spec, {"x": [1, 2]}, sampler="grid",
                                    objective_metric="score")
    (interrupted,) = search.study.get_trials(deepcopy=False)
    return search, interrupted


def _assert_both_trials_completed_with_their_scores(search) -> None:
    trials = search.study.get_trials(deepcopy=False)
    assert [(t.state, t.value) for t in trials] == [(TrialState.COMPLETE, t.params["x"]) for t in trials]
    assert len(trials) == 2


def test_a_trial_whose_job_was_never_launched_is_submitted_again_on_restart(tmp_path):
    search, interrupted = _restarted_after_a_kill_mid_submit(tmp_path)
    assert search.backend.status(interrupted.user_attrs["job_name"]).reason == NEVER_LAUNCHED
    search.run()
    _assert_both_trials_completed_with_their_scores(search)


_HOLDS_THE_LOCK = """
import fcntl, sys, time
lock = open(sys.argv[1], "a")
fcntl.flock(lock, fcntl.LOCK_EX)  # as the dying submitter's launcher does while it records "never launched"
print("held", flush=True)
time.sleep(600)
"""


def test_a_trial_whose_job_still_said_launching_on_restart_is_submitted_again_once_it_is_never_launched(tmp_path):
    """CI saw it: the search restarted while the killed submitter's launcher was recording the job as never
    launched (it holds the job's lock meanwhile), so the job said "launching", the trial re-attached to it,
    and the trial failed when the record landed. Here a process holds that lock until the restarted search
    has re-attached; once it lets go, the job reads as never launched and must be submitted again."""
    search, interrupted = _restarted_after_a_kill_mid_submit(tmp_path)
    name = interrupted.user_attrs["job_name"]
    lock = submission_lock(search.backend.job_dir(name))
    holder = subprocess.Popen([sys.executable, "-c", _HOLDS_THE_LOCK, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        assert search.backend.status(name).message == "launching"

        def let_go_once_re_attached():
            wait_for(lambda: interrupted.number in search.running, timeout=120, what="the trial to re-attach")
            holder.kill()

        releaser = threading.Thread(target=let_go_once_re_attached, daemon=True)
        releaser.start()
        search.run()
        releaser.join(10)
    finally:
        holder.kill()
        holder.wait()

    _assert_both_trials_completed_with_their_scores(search)
    job_dir = search.backend.job_dir(name)  # the never-launched attempt, archived beside the one that ran
    archived = job_dir.with_name(job_dir.name + ".1")
    assert (archived / "job.json").exists() and not (archived / "launcher.json").exists()


_PACED = """
import json, os, sys, time
quality, markers = sys.argv[1], sys.argv[2]
def report(step, auc):
    print(json.dumps({"event": "metrics", "step": step, "loss": 1 - auc, "auc": auc}), flush=True)
if quality.startswith("good"):
    for step in range(1, 201):
        report(step, 0.9)
    open(os.path.join(markers, quality), "w").close()
    sys.exit(0)
for step in (1, 2, 3):
    report(step, 0.2)
while len(os.listdir(markers)) < 2:  # whatever the grid's order, the good trials complete first
    time.sleep(0.1)
for step in range(4, 201):  # until the search has seen both complete and prunes this trial
    report(step, 0.2)
    time.sleep(0.2)
time.sleep(600)
"""


@pytest.mark.parametrize("pruner", ["median", "successive_halving"])
def test_a_trial_worse_than_the_others_is_pruned_and_its_running_job_deleted(tmp_path, pruner):
    markers = search_setup.data_dir(tmp_path) / "markers"  # a directory the trials share, declared as theirs
    markers.mkdir(parents=True)
    spec = TrainingJobSpec(framework="generic", num_workers=1, output_dirs=[str(markers)],
                           command=["python", "-c", _PACED, "{{ params.quality }}", str(markers)])
    search = search_setup.scheduler(tmp_path, lambda name: spec, {"quality": ["good_a", "good_b", "bad"]},
                                    sampler="grid", max_parallel=2, seed=0, pruner=pruner,
                                    pruning_startup_trials=2)
    search.run()

    trials = {t.params["quality"]: t for t in search.study.get_trials(deepcopy=False)}
    bad = trials["bad"]
    assert bad.state is TrialState.PRUNED
    assert len(bad.intermediate_values) >= 3 and set(bad.intermediate_values.values()) == {0.2}
    with pytest.raises(JobNotFound):
        search.backend.status(bad.user_attrs["job_name"])
    assert not search.backend.job_dir(bad.user_attrs["job_name"]).exists()
    leftovers = processes_naming(markers)
    assert not leftovers, "the pruned trial's worker is still running"
    for name in ("good_a", "good_b"):
        assert trials[name].state is TrialState.COMPLETE and trials[name].value == 0.9
        assert search.backend.status(trials[name].user_attrs["job_name"]).state.value == "SUCCEEDED"


def test_cancelling_the_running_trials_stops_their_jobs(tmp_path):
    spec = TrainingJobSpec(framework="generic", num_workers=1,
                           command=["python", "-c", "import time; time.sleep(600)", "{{ params.x }}", str(tmp_path)])
    search = search_setup.scheduler(tmp_path, lambda name: spec, {"x": [1, 2]}, sampler="grid", max_parallel=2)
    loop = threading.Thread(target=search.run)
    loop.start()
    try:
        wait_for(lambda: len(search.running) == 2 and all(
            search.backend.status(run.job_name).state.value == "RUNNING" for run in list(search.running.values())),
            what="both trials running")
    finally:
        search.cancel_running()  # what the operator's on_kill does
        loop.join(timeout=120)
    assert not loop.is_alive()
    trials = search.study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.FAIL] * 2
    assert all("CANCELLED" in t.user_attrs["failure"] for t in trials)
    assert not processes_naming(tmp_path)


def test_a_systematic_failure_stops_the_search_instead_of_spending_its_budget(tmp_path):
    template = search_setup.lightgbm_template(tmp_path)
    (search_setup.data_dir(tmp_path) / "train.npz").unlink()  # every trial fails: its data is missing
    search = search_setup.scheduler(tmp_path, template, search_setup.LIGHTGBM_SPACE,
                                    sampler="random", n_trials=20, max_parallel=1, seed=0)
    search.run()

    trials = search.study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.FAIL] * 3
    assert "data file not found" in trials[0].user_attrs["failure"]
    with pytest.raises(Exception, match="no trial of study .* completed"):
        summarize(search.study)
