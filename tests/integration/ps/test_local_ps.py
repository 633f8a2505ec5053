"""Parameter-server training on the local backend with real processes (framework tensorflow-ps, the bundled
trainer): 2 ps, 2 workers and a chief train the digits and the loss decreases; the chief's checkpoints resume a
resubmitted job; a worker SIGKILLed mid-run costs the job nothing (the others run its steps); a ps SIGKILLed
fails the job, and a ps asked to stop (SIGTERM, as an eviction asks) preempts it: the follow core resubmits it,
and it resumes from the chief's checkpoint."""

from __future__ import annotations

import json
import logging
import re
import signal
import threading
from pathlib import Path

import pytest

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.drivers import SyncDriver, job_options
from airflow_ml_provider.jobs.follow import Action, Follower, FollowOptions
from airflow_ml_provider.jobs.preemption import resubmit
from airflow_ml_provider.jobs.roles import PS_TRAINER
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState
from support import TRAINING_IMAGE, final_status, job_log, needs_training_env, rank_process, wait_for

pytestmark = [pytest.mark.integration, needs_training_env]

ROLES = {"chief": {}, "ps": {"count": 2}, "worker": {"count": 2}}
RANKS = {"chief 0": 0, "ps 0": 1, "ps 1": 2, "worker 0": 3, "worker 1": 4}  # the order of the roles, then index
TIMEOUT_S = 600


@pytest.fixture
def backend(tmp_path) -> LocalBackend:
    return LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=5)


def _spec(backend: LocalBackend, name: str, *args: str, env: dict[str, str] | None = None) -> TrainingJobSpec:
    artifacts = backend.root / "artifacts" / name  # the job's own directories: writable in its sandbox
    return TrainingJobSpec(framework="tensorflow-ps", roles=ROLES, command=["python", "-m", PS_TRAINER, *args],
                           checkpoint_dir=str(artifacts / "checkpoints"), model_dir=str(artifacts / "model"),
                           env=env or {})


def _events(log: str, event: str) -> list[dict]:
    found = [json.loads(text) for text in re.findall(r"^\[chief 0\] (\{.*\})$", log, re.M)]
    return [e for e in found if e["event"] == event]


def _run(backend: LocalBackend, name: str, spec: TrainingJobSpec) -> tuple[JobState, str, str]:
    assert backend.submit(name, spec, {})
    status = final_status(backend, name, timeout=TIMEOUT_S)
    return status.state, status.message, job_log(backend, name)


def _kill_mid_run(backend: LocalBackend, name: str, label: str, signum: int) -> None:
    """``signum`` to the process ``label`` (e.g. ``worker 1``) once the chief has logged step 100 and a checkpoint."""
    wait_for(lambda: _events(job_log(backend, name), "checkpoint"), timeout=TIMEOUT_S, what="the first checkpoint")
    victim = wait_for(lambda: rank_process(backend.job_dir(name), RANKS[label], PS_TRAINER, rank_env="AIRFLOW_ML_RANK"),
                      what=f"{label}'s process")
    assert victim.environ()["AIRFLOW_ML_ROLE"] == label.split()[0]
    victim.send_signal(signum)


def test_two_ps_two_workers_and_a_chief_train_the_loss_decreases_and_a_resubmitted_job_resumes(backend):
    state, message, log = _run(backend, "ps-train", _spec(backend, "ps-train", "--steps", "200"))
    assert (state, message) == (JobState.SUCCEEDED, ""), log
    for label in RANKS:
        assert re.search(rf"^\[{label}\] ", log, re.M), (label, log)
    for label in ("ps 0", "ps 1", "worker 0", "worker 1"):
        assert re.search(rf"^\[{label}\] {label} serving at 127\.0\.0\.1:\d+$", log, re.M), log
    losses = [e["loss"] for e in _events(log, "metrics")]
    assert [e["step"] for e in _events(log, "metrics")] == list(range(10, 201, 10))
    assert losses[-1] < losses[0] / 3, losses
    assert _events(log, "result")[0]["accuracy"] > 0.8
    checkpoints = [e["path"] for e in _events(log, "checkpoint")]
    assert [Path(p).name for p in checkpoints] == ["ckpt-50", "ckpt-100", "ckpt-150", "ckpt-200"]
    assert Path(checkpoints[1] + ".index").is_file() and Path(_events(log, "model_saved")[0]["path"]).is_file()
    assert "WARNING" not in log and "Traceback" not in log, log  # (TensorFlow's saver retracing notice dropped)

    # resubmitted with AIRFLOW_ML_RESUME_FROM (what the follow core sets after a preemption): steps 101-300 only
    state, _, log = _run(backend, "ps-train", _spec(backend, "ps-train", "--steps", "300",
                                                    env={"AIRFLOW_ML_RESUME_FROM": checkpoints[1]}))
    assert state is JobState.SUCCEEDED, log
    assert _events(log, "resumed") == [{"event": "resumed", "path": checkpoints[1], "rank": 0,
                                        "source": "AIRFLOW_ML_RESUME_FROM", "step": 100}]
    steps = [e["step"] for e in _events(log, "metrics")]
    assert steps == list(range(110, 301, 10)), steps
    assert _events(log, "metrics")[0]["loss"] < losses[0] / 2  # it went on from the trained variables


def test_a_worker_sigkilled_mid_run_costs_nothing_the_others_run_its_steps(backend):
    spec = _spec(backend, "ps-worker", "--steps", "1500", "--log-every", "50", "--checkpoint-every", "100")
    assert backend.submit("ps-worker", spec, {})
    _kill_mid_run(backend, "ps-worker", "worker 1", signal.SIGKILL)
    status = final_status(backend, "ps-worker", timeout=TIMEOUT_S)
    log = job_log(backend, "ps-worker")
    assert status.state is JobState.SUCCEEDED, log
    assert status.message == "lost worker 1 (was killed by signal SIGKILL (exit -9)); the others finished their steps"
    assert ("[launcher] worker 1 was killed by signal SIGKILL (exit -9); the job goes on with 1 worker "
            "(roles.worker.on_failure: tolerate)") in log
    kill_at = log.index("[launcher] worker 1 was killed")
    after = [json.loads(text)["step"] for text in re.findall(r"^\[chief 0\] (\{\"event\": \"metrics\".*\})$",
                                                              log[kill_at:], re.M)]
    assert after and after[-1] == 1500, after  # every scheduled step ran, those after the kill on worker 0
    assert status.exit_codes[RANKS["worker 1"]] == -9 and status.exit_codes[RANKS["chief 0"]] == 0


def test_a_ps_sigkilled_mid_run_fails_the_job(backend):
    spec = _spec(backend, "ps-kill", "--steps", "100000", "--log-every", "50", "--checkpoint-every", "100")
    assert backend.submit("ps-kill", spec, {})
    _kill_mid_run(backend, "ps-kill", "ps 1", signal.SIGKILL)
    status = final_status(backend, "ps-kill", timeout=TIMEOUT_S)
    assert status.state is JobState.FAILED, job_log(backend, "ps-kill")
    assert status.message == "ps 1 was killed by signal SIGKILL (exit -9) (roles.ps.on_failure: fail)"


def test_a_ps_evicted_preempts_the_job_and_the_follow_core_resubmits_it_from_the_chiefs_checkpoint(backend):
    """The follow core's own decisions, driven as a training task drives them (jobs.drivers, jobs.preemption)."""
    name = "ps-evict"
    spec = _spec(backend, name, "--steps", "100000", "--log-every", "50", "--checkpoint-every", "100")
    assert backend.submit(name, spec, {})
    source = backend.log_source(name)
    follower = Follower(job_options(FollowOptions(poll_interval=0.5), backend, name, spec, source))
    killer = threading.Thread(target=_kill_mid_run, args=(backend, name, "ps 0", signal.SIGTERM))
    killer.start()
    step = SyncDriver(follower, logging.getLogger(__name__), backend, name, source).run()
    killer.join()
    assert step.action is Action.RESUBMIT and step.status.state is JobState.PREEMPTED, job_log(backend, name)
    assert step.status.message == ("ps 0 was killed by signal SIGTERM (exit -15): evicted (on_failure: fail); "
                                   "resubmitted, the job resumes from the chief's checkpoint")
    newest = _events(job_log(backend, name), "checkpoint")[-1]
    assert (step.resume.path, step.resume.step) == (newest["path"], newest["step"])

    again = _spec(backend, name, "--steps", str(newest["step"] + 100), "--log-every", "50")
    resubmit(backend, name, again, {}, follower, step.resume, source.restarts_with_job)
    step = SyncDriver(follower, logging.getLogger(__name__), backend, name, source).run()
    log = job_log(backend, name)
    assert step.action is Action.FINISH and step.status.state is JobState.SUCCEEDED, log
    assert _events(log, "resumed") == [{"event": "resumed", "path": newest["path"], "rank": 0,
                                        "source": "AIRFLOW_ML_RESUME_FROM", "step": newest["step"]}]
    assert [e["step"] for e in _events(log, "metrics")] == [newest["step"] + 50, newest["step"] + 100]
