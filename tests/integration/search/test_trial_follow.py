"""Search trials are followed by the same core as training tasks: a preempted trial is resubmitted and
resumes from its checkpoint (no trial of the budget spent), and a fail_on line stops a trial."""

from __future__ import annotations

import textwrap

import pytest
import search_setup
from optuna.trial import TrialState

from airflow_ml_provider.jobs.follow import FollowOptions
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.search.runner import TrialScheduler
from airflow_ml_provider.search.space import parse_settings, parse_space
from airflow_ml_provider.search.study import open_storage, open_study, study_name

pytestmark = pytest.mark.integration

SPACE = {"x": {"type": "float", "low": 0.0, "high": 1.0}}
# Attempt 1 checkpoints, then is killed by a signal (a preemption); attempt 2 resumes from that checkpoint.
_PREEMPTED_ONCE = textwrap.dedent("""
    import json, os, signal, sys
    x = float(sys.argv[1])
    ckpt = os.environ["AIRFLOW_ML_CHECKPOINT_DIR"] + "/step-1"
    if os.environ.get("AIRFLOW_ML_RESUME_FROM") is None:
        print(json.dumps({"event": "checkpoint", "step": 1, "path": ckpt}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    print("resumed from", os.environ["AIRFLOW_ML_RESUME_FROM"], flush=True)
    print(json.dumps({"event": "result", "score": x, "resumed_from": os.environ["AIRFLOW_ML_RESUME_FROM"]}), flush=True)
""")
_OOM = "print('loading', flush=True)\nprint('CUDA out of memory', flush=True)\nimport time\ntime.sleep(600)"


def search(tmp_path, script: str, follow: FollowOptions, n_trials: int) -> TrialScheduler:
    jobs = search_setup.backend(tmp_path)

    def template(name: str) -> TrainingJobSpec:
        artifacts = jobs.default_artifact_dir(name)
        return TrainingJobSpec(framework="generic", num_workers=1, command=["python", "-c", script, "{{ params.x }}"],
                               model_dir=f"{artifacts}/model", checkpoint_dir=f"{artifacts}/checkpoints")

    space = parse_space(SPACE)
    settings = parse_settings(sampler="random", n_trials=n_trials, objective_metric="score", seed=3,
                              pruner="none", poll_interval=0.2)
    identity = JobIdentity("search_tests", "follow", "run")
    study = open_study(open_storage(f"sqlite:///{tmp_path / 'optuna.db'}"), study_name(identity), settings, space)
    return TrialScheduler(jobs, study, space, settings, template, identity, follow=follow)


def test_a_preempted_trial_is_resubmitted_and_resumes_from_its_checkpoint(tmp_path):
    scheduler = search(tmp_path, _PREEMPTED_ONCE, FollowOptions(max_preemptions=2), n_trials=2)
    scheduler.run()
    trials = scheduler.study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2, [t.user_attrs for t in trials]
    for trial in trials:
        assert trial.value == pytest.approx(trial.params["x"])
        log = (scheduler.backend.job_dir(trial.user_attrs["job_name"]) / "output.log").read_text()
        assert "resumed from " in log and log.count("/checkpoints/step-1") >= 2  # reported, then resumed from


def test_fail_on_stops_a_trial_and_cancels_its_job(tmp_path):
    scheduler = search(tmp_path, _OOM, FollowOptions(rules={"fail_on": ["out of memory"]}), n_trials=1)
    scheduler.run()
    (trial,) = scheduler.study.get_trials()
    assert trial.state is TrialState.FAIL
    assert "fail_on 'out of memory'" in trial.user_attrs["failure"]
    assert scheduler.backend.status(trial.user_attrs["job_name"]).state.value == "CANCELLED"


def test_a_trial_may_report_its_model_where_a_training_task_may_and_nowhere_else(tmp_path):
    """A trial's job is followed with the options a training task's gets (jobs.drivers.job_options): its
    model may be in the backend's artifact directory for it even when the spec names no model_dir."""
    jobs = search_setup.backend(tmp_path)
    report = ("import json, sys\n"
              "print(json.dumps({'event': 'model_saved', 'path': sys.argv[2] + '/model'}), flush=True)\n"
              "print(json.dumps({'event': 'model_saved', 'path': '/etc/elsewhere/model'}), flush=True)\n"
              "print(json.dumps({'event': 'result', 'score': float(sys.argv[1])}), flush=True)\n")

    def template(name: str) -> TrainingJobSpec:
        return TrainingJobSpec(framework="generic", num_workers=1,
                               command=["python", "-c", report, "{{ params.x }}", jobs.default_artifact_dir(name)])

    settings = parse_settings(sampler="random", n_trials=1, objective_metric="score", seed=3, pruner="none",
                              poll_interval=0.2)
    identity = JobIdentity("search_tests", "models", "run")
    space = parse_space(SPACE)
    study = open_study(open_storage(f"sqlite:///{tmp_path / 'optuna.db'}"), study_name(identity), settings, space)
    scheduler = TrialScheduler(jobs, study, space, settings, template, identity)
    scheduler.run()
    (trial,) = scheduler.study.get_trials()
    assert trial.state is TrialState.COMPLETE
    assert trial.user_attrs["model_path"] == jobs.default_artifact_dir(trial.user_attrs["job_name"]) + "/model"
