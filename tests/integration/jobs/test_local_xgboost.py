"""XGBoost on the local backend with real processes: the job's tracker in its sandbox, a user's own
CommunicatorContext script run unchanged by two workers that end with byte-identical models, and a worker
killed from outside read as a preemption (the tracker left behind does not keep the job alive), and a tracker
that cannot start failing the job at once."""

from __future__ import annotations

import hashlib
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState
from support import TRAINING_IMAGE, final_status, job_log, needs_training_env, rank_process, wait_for

pytestmark = [pytest.mark.integration, needs_training_env]

USER_SCRIPT = str(Path(__file__).parents[2] / "fixtures" / "xgboost" / "user_script.py")


@pytest.fixture
def backend(tmp_path) -> LocalBackend:
    return LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=5)


def _spec(backend: LocalBackend, name: str, rounds: int) -> tuple[TrainingJobSpec, Path]:
    model_dir = backend.root / "artifacts" / name / "model"  # the job's own directory: writable in its sandbox
    return TrainingJobSpec(framework="xgboost", num_workers=2, model_dir=str(model_dir),
                           command=["python", USER_SCRIPT, "--out", str(model_dir), "--rounds", str(rounds)]), model_dir


def test_a_users_communicator_context_script_trains_on_two_workers_with_identical_models(backend):
    spec, model_dir = _spec(backend, "xgb-user", rounds=10)
    assert backend.submit("xgb-user", spec, {})
    status = final_status(backend, "xgb-user", timeout=300)
    log = job_log(backend, "xgb-user")
    assert status.state is JobState.SUCCEEDED, log
    assert re.search(r"^\[xgboost-tracker\] xgboost tracker listening on 127\.0\.0\.1:\d+ for 2 workers$", log, re.M)
    lines = dict(re.findall(r"^\[rank (\d)\] (rank=.*)$", log, re.M))
    assert set(lines) == {"0", "1"}, log
    for rank, line in lines.items():
        assert line.startswith(f"rank={rank} world=2 task_id={rank} sha256=")
    models = [(model_dir / f"model-{rank}.json").read_bytes() for rank in (0, 1)]
    assert models[0] == models[1] and len(models[0]) > 1000
    assert {line.rsplit("=", 1)[1] for line in lines.values()} == {hashlib.sha256(models[0]).hexdigest()}
    assert "[xgboost-tracker] xgboost tracker: every worker finished" in log


def test_a_worker_killed_from_outside_is_a_preemption_and_ends_the_job(backend):
    spec, _ = _spec(backend, "xgb-kill", rounds=100_000)  # trains until killed
    assert backend.submit("xgb-kill", spec, {})
    job_dir = backend.job_dir("xgb-kill")
    wait_for(lambda: "Task 1 got rank 1" in job_log(backend, "xgb-kill"), timeout=300, what="rank 1 training")
    victim = wait_for(lambda: rank_process(job_dir, 1, USER_SCRIPT, rank_env="DMLC_TASK_ID"), what="rank 1's process")
    victim.send_signal(signal.SIGKILL)
    status = final_status(backend, "xgb-kill", timeout=120)
    assert status.state is JobState.PREEMPTED, job_log(backend, "xgb-kill")
    assert status.message == "rank 1 was killed by a signal (exit -9)"


def test_a_tracker_that_cannot_start_fails_the_job_at_once_naming_it(tmp_path):
    """An image without xgboost: the tracker's import fails, and the workers waiting at the gate are stopped
    instead of waiting out its 600 s."""
    bare = tmp_path / "bare-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    backend = LocalBackend(tmp_path / "ml", image=str(bare), cancel_grace_s=5)
    assert backend.submit("xgb-bare", TrainingJobSpec(framework="xgboost", num_workers=2,
                                                      command=["python", "-c", "print('never')"]), {})
    status = final_status(backend, "xgb-bare", timeout=120)
    log = job_log(backend, "xgb-bare")
    assert status.state is JobState.FAILED and status.message == "the xgboost tracker exited with code 1", log
    assert "[xgboost-tracker] ModuleNotFoundError: No module named 'xgboost'" in log
    assert "never" not in log
