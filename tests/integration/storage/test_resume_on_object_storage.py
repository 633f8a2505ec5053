"""A preempted job whose data, checkpoints and model live on S3 (moto on loopback, a test double of S3)
resumes where its last checkpoint left off, never training a finished round or epoch again, and leaves
only the newest 3 checkpoints in the bucket.

Real processes on the local backend: 2 LightGBM socket workers, or 2 Horovod ranks. A worker is
SIGKILLed after the first checkpoint (the job ends PREEMPTED), then the job is resubmitted as the
operators do (``jobs.preemption.resubmission``: ``AIRFLOW_ML_RESUME_FROM`` = the last checkpoint its
log reported). The S3 credentials reach the workers only through ``submit(secrets=...)``.
"""

from __future__ import annotations

import json
import signal
import uuid

import numpy as np
import psutil
import pytest

from airflow_ml_provider.artifact_layout import job_artifact_dir, job_dirs
from airflow_ml_provider.jobs.backends.local.backend import JOB_UID_ENV, LocalBackend
from airflow_ml_provider.jobs.backends.local.sandbox import SandboxLimits
from airflow_ml_provider.jobs.follow import ResumePoint
from airflow_ml_provider.jobs.preemption import RESUME_ENV, resubmission
from airflow_ml_provider.jobs.spec import Framework, TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState
from airflow_ml_provider.plugins.tensorboard_scalars import read_scalars
from airflow_ml_provider.runtime import storage
from airflow_ml_provider.runtime.datasets import write_synthetic
from support import TRAINING_IMAGE, assert_steps_once, needs_horovod, wait_for

pytestmark = pytest.mark.integration

CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def _events(backend: LocalBackend, name: str, kind: str) -> list[dict]:
    log = backend.job_dir(name) / "output.log"
    found = []
    for line in log.read_text().splitlines() if log.exists() else []:
        text = line.partition("] ")[2]
        if text.startswith("{") and (event := json.loads(text)).get("event") == kind:
            found.append(event)
    return found


def _kill_rank(backend: LocalBackend, name: str, rank: int, rank_env: str) -> None:
    uid = json.loads((backend.job_dir(name) / "job.json").read_text())["uid"]

    def victim():
        for proc in psutil.process_iter():
            try:
                env, cmdline = proc.environ(), proc.cmdline()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            if (env.get(JOB_UID_ENV) == uid and env.get(rank_env) == str(rank)
                    and not any(arg.endswith("/local/output.py") for arg in cmdline)):  # the rank, not its shim
                return proc
        return None

    wait_for(victim, what=f"rank {rank}'s process").send_signal(signal.SIGKILL)


def _preempt_and_resume(s3, backend: LocalBackend, name: str, spec: TrainingJobSpec, rank_env: str):
    """Run the job, kill rank 1 after its first checkpoint, resubmit it; returns (first checkpoint
    reported before the kill, the second attempt's name) once the second attempt has ended."""
    env = s3.worker_env()
    secrets = {k: env.pop(k) for k in CREDENTIALS}
    spec = spec.model_copy(update={"env": {**spec.env, **env}})
    assert backend.submit(name, spec, {}, secrets=secrets)
    wait_for(lambda: _events(backend, name, "checkpoint"), timeout=300, what="a first checkpoint")
    _kill_rank(backend, name, 1, rank_env)
    status = wait_for(lambda: (s := backend.status(name)).state.is_terminal and s, timeout=120, what="the end")
    assert status.state is JobState.PREEMPTED, status
    last = _events(backend, name, "checkpoint")[-1]
    again, _ = resubmission(spec, {}, 1, ResumePoint(last["path"], last.get("step"), last.get("epoch")))
    assert backend.submit(name, again, {}, secrets=secrets)
    status = wait_for(lambda: (s := backend.status(name)).state.is_terminal and s, timeout=600, what="the resumed run")
    assert status.state is JobState.SUCCEEDED, (backend.job_dir(name) / "output.log").read_text()[-3000:]
    record = (backend.job_dir(name) / "job.json").read_text()
    assert all(secrets[k] not in record for k in CREDENTIALS), "credentials reached the job record"
    return last


def _checkpoint_keys(s3, bucket: str, name: str) -> list[str]:
    """The job's checkpoints in the bucket (its TensorBoard directory, ``checkpoints/tensorboard/``, aside)."""
    return [key for key in s3.keys(bucket, f"ml/artifacts/{name}/checkpoints/") if "/checkpoints/tensorboard/" not in key]


@pytest.fixture
def backend(tmp_path, s3) -> LocalBackend:
    """Its jobs may reach the S3 server (the hook allows a connection's endpoint the same way)."""
    return LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=2,
                        limits=SandboxLimits(egress=(s3.url,)))


def test_a_preempted_lightgbm_job_resumes_from_its_s3_checkpoint(s3, bucket, s3_worker_env, backend):
    root = f"s3://{bucket}/ml"
    write_synthetic(f"{root}/data/train.npz", f"{root}/data/valid.npz", rows=20_000, features=20, seed=0)
    name, rounds = f"aml-lgb-{uuid.uuid4().hex[:8]}", 400
    job_dir = job_artifact_dir(root, name)
    spec = TrainingJobSpec(
        framework=Framework.LIGHTGBM, num_workers=2, **job_dirs(job_dir),
        command=["python", "-m", "airflow_ml_provider.runtime.lightgbm_trainer",
                 "--train-data", f"{root}/data/train.npz", "--valid-data", f"{root}/data/valid.npz",
                 "--params-json", json.dumps({"learning_rate": 0.05, "num_leaves": 7, "seed": 0}),
                 "--num-boost-round", str(rounds), "--checkpoint-every", "5", "--log-every", "5"],
    )  # fmt: skip
    last = _preempt_and_resume(s3, backend, name, spec, "AIRFLOW_ML_RANK")
    done = last["step"]
    assert 5 <= done < rounds and last["path"] == f"{job_dirs(job_dir)['checkpoint_dir']}/booster-{done:06d}.txt"

    resumed = _events(backend, name, "resumed")  # every worker starts from the same booster
    assert {(e["rank"], e["path"], e["source"], e["round"]) for e in resumed} == {
        (rank, last["path"], RESUME_ENV, done) for rank in (0, 1)
    }
    assert f"Resuming from checkpoint {last['path']}" in (backend.job_dir(name) / "output.log").read_text()
    steps = [event["step"] for event in _events(backend, name, "metrics")]
    assert_steps_once(steps, done + 5, rounds, every=5)
    assert [e["step"] for e in _events(backend, name, "checkpoint")] == list(range(done + 5, rounds + 1, 5))
    [saved] = _events(backend, name, "model_saved")
    assert saved["path"] == f"{job_dirs(job_dir)['model_dir']}/model.txt"
    import lightgbm as lgb

    with storage.local_copy(saved["path"]) as local:
        assert lgb.Booster(model_file=local).current_iteration() == rounds
    kept = (rounds - 10, rounds - 5, rounds)  # boosters by rank 0, each worker's scores beside them
    assert _checkpoint_keys(s3, bucket, name) == [
        f"ml/artifacts/{name}/checkpoints/{file}" for file in
        [f"booster-{n:06d}.txt" for n in kept] + [f"scores-{r}of2-{n:06d}.npz" for r in (0, 1) for n in kept]]
    # rank 0's points in the job's TensorBoard directory on S3, each attempt's event file uploaded beside the
    # other's (the killed one's up to its last upload), read back as the training view reads them
    board = f"{job_dirs(job_dir)['checkpoint_dir']}/tensorboard"
    assert len(s3.keys(bucket, f"ml/artifacts/{name}/checkpoints/tensorboard/")) == 2
    read = read_scalars(board)
    assert read["note"] is None and set(steps) <= {step for step, _ in read["runs"]["."]["loss"]}, read
    assert read["runs"]["."]["loss"][-1][0] == rounds


@needs_horovod
def test_a_preempted_horovod_job_resumes_from_its_s3_checkpoint(s3, bucket, s3_worker_env, backend):
    root = f"s3://{bucket}/ml"
    name, epochs = f"aml-hvd-{uuid.uuid4().hex[:8]}", 6
    job_dir = job_artifact_dir(root, name)
    spec = TrainingJobSpec(
        framework=Framework.HOROVOD, num_workers=2, **job_dirs(job_dir),
        command=["python", "-m", "airflow_ml_provider.runtime.horovod_keras", "--epochs", str(epochs),
                 "--steps-per-epoch", "60"],
    )
    last = _preempt_and_resume(s3, backend, name, spec, "HOROVOD_RANK")
    done = last["epoch"]
    assert 1 <= done < epochs and last["path"] == f"{job_dirs(job_dir)['checkpoint_dir']}/ckpt-{done:06d}.npz"

    resumed = _events(backend, name, "resumed")
    assert {(e["rank"], e["path"], e["epoch"], e["step"]) for e in resumed} == {
        (rank, last["path"], done, last["step"]) for rank in (0, 1)
    }
    trained = [event["epoch"] for event in _events(backend, name, "metrics")]
    assert trained == list(range(done + 1, epochs + 1)), "a finished epoch was trained again, or one skipped"
    [saved] = _events(backend, name, "model_saved")
    assert saved["path"] == f"{job_dirs(job_dir)['model_dir']}/model.keras"
    keys = _checkpoint_keys(s3, bucket, name)
    assert [k.rsplit("/", 1)[1] for k in keys] == [f"ckpt-{e:06d}.npz" for e in range(epochs - 2, epochs + 1)]
    board = read_scalars(f"{job_dirs(job_dir)['checkpoint_dir']}/tensorboard")  # rank 0's epochs, both attempts'
    assert set(trained) <= {step for step, _ in board["runs"]["."]["loss"]} and "accuracy" in board["runs"]["."], board
    with storage.open_read(f"{job_dirs(job_dir)['checkpoint_dir']}/ckpt-{epochs:06d}.npz") as f, np.load(f) as checkpoint:
        assert int(checkpoint["epoch"]) == epochs
