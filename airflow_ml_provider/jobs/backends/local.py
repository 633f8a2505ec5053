"""The embedded default backend: a job is a group of processes on this machine, needing no cluster.

Each job lives in ``<root>/jobs/<name>/``: ``job.json`` (the spec), ``launcher.json`` (the launcher
process), ``output.log`` (every worker's lines, prefixed by rank), ``status.json`` (written once
the job ends) and ``cancelled`` (a marker). The launcher runs in its own session, detached from the
Airflow task, so a restarted task finds the job still running and attaches to it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

from airflow_ml_provider.jobs.backends.base import Backend, JobNotFound, JobSubmissionError
from airflow_ml_provider.jobs.local_discovery import ETCD_ENV, slots_prefix, write_slots
from airflow_ml_provider.jobs.etcd_kv import EtcdError, EtcdKV
from airflow_ml_provider.jobs.spec import Framework, TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState, JobStatus
from airflow_ml_provider.logs.files import FileLogSource

JOB_UID_ENV = "AIRFLOW_ML_JOB_UID"  # set in every process of a job: how cancel finds them all
_LAUNCH_TIMEOUT_S = 120  # a job dir with no launcher after this long was abandoned mid-submit


class LocalBackend(Backend):
    """Runs jobs as local process groups: ``horovodrun`` on localhost, or N socket-connected workers.

    Args:
        root: directory for job records and default artifacts.
        image: default Python environment prefix for workers (a spec's ``image`` overrides it);
            None means this interpreter's environment.
        cancel_grace_s: seconds between SIGTERM and SIGKILL when cancelling.
        etcd: etcd endpoint holding elastic jobs' worker slots (default: ``$AIRFLOW_ML_ETCD``); a job's
            slots are ``/airflow-ml/jobs/<name>/slots/<n>`` keys, and adding one adds a worker.
    """

    name = "local"

    def __init__(self, root: str | os.PathLike, image: str | None = None, cancel_grace_s: float = 10.0,
                 etcd: str | None = None):
        self.root = Path(root)
        self.image = image
        self.cancel_grace_s = cancel_grace_s
        self.etcd = etcd or os.environ.get(ETCD_ENV) or None
        self._launchers: dict[str, subprocess.Popen] = {}

    def job_dir(self, name: str) -> Path:
        return self.root / "jobs" / name

    def default_artifact_dir(self, name: str) -> str:
        return str(self.root / "artifacts" / name)

    def render(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> str:
        from airflow_ml_provider.jobs.backends.local_launcher import launch_plan

        plan = launch_plan(spec, self._image_for(spec), self.job_dir(name), self.etcd)
        return json.dumps({"name": name, "labels": labels, **plan}, indent=2)

    def submit(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> bool:
        image = self._image_for(spec)
        _check_image(spec, image)
        job_dir = self.job_dir(name)
        job_dir.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            try:
                job_dir.mkdir()  # atomic: of two concurrent submitters exactly one creates the job
                break
            except FileExistsError:
                if not self._status_or_none(name, JobState.PENDING).state.is_terminal:
                    return False
                self._archive(job_dir)
        else:
            raise JobSubmissionError(f"could not claim job directory {job_dir}")
        uid = uuid.uuid4().hex
        if _is_elastic_horovod(spec):
            self._write_slots(name, spec)
        record = {"name": name, "uid": uid, "labels": labels, "image": image, "submitted_at": time.time(),
                  "etcd": self.etcd, "spec": spec.model_dump(mode="json")}
        _write_json(job_dir / "job.json", record)
        launcher = subprocess.Popen(
            [sys.executable, "-m", "airflow_ml_provider.jobs.backends.local_launcher", str(job_dir)],
            env={**os.environ, JOB_UID_ENV: uid},
            stdin=subprocess.DEVNULL,
            stdout=(job_dir / "launcher.log").open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # survives the task process; its own process group
            close_fds=True,
        )
        self._launchers[name] = launcher
        _write_json(job_dir / "launcher.json", {"pid": launcher.pid, "create_time": _create_time(launcher.pid)})
        return True

    def status(self, name: str) -> JobStatus:
        job_dir = self.job_dir(name)
        if not job_dir.is_dir():
            raise JobNotFound(f"no local job {name!r} under {self.root}")
        if (job_dir / "cancelled").exists():
            return JobStatus(JobState.CANCELLED, (job_dir / "cancelled").read_text().strip())
        final = _read_json(job_dir / "status.json")
        if final is not None:
            return JobStatus.from_dict(final)
        launcher = _read_json(job_dir / "launcher.json")
        if launcher is None:
            if time.time() - job_dir.stat().st_mtime > _LAUNCH_TIMEOUT_S:
                return JobStatus(JobState.FAILED, "the job was never launched (its submitter died)")
            return JobStatus(JobState.PENDING, "launching")
        if self._launcher_alive(name, launcher):
            return JobStatus(JobState.RUNNING)
        if (final := _read_json(job_dir / "status.json")) is not None:  # it finished just now
            return JobStatus.from_dict(final)
        return JobStatus(
            JobState.PREEMPTED,
            "the launcher was killed from outside before the job finished (machine restart, OOM killer or "
            "a signal); see launcher.log in " + str(job_dir),
        )

    def cancel(self, name: str, reason: str = "cancelled") -> None:
        job_dir = self.job_dir(name)
        record = _read_json(job_dir / "job.json")
        if record is None:
            return
        if not self._status_or_none(name, JobState.CANCELLED).state.is_terminal:
            (job_dir / "cancelled").write_text(reason + "\n")
        _terminate(lambda: job_processes(record["uid"]), self.cancel_grace_s)
        self._reap(name)

    def delete(self, name: str) -> None:
        self.cancel(name, "deleted")
        record = _read_json(self.job_dir(name) / "job.json")
        if record and record.get("etcd") and _is_elastic_horovod(TrainingJobSpec(**record["spec"])):
            EtcdKV(record["etcd"]).delete_prefix(slots_prefix(name))
        shutil.rmtree(self.job_dir(name), ignore_errors=True)

    def log_source(self, name: str) -> FileLogSource:
        return FileLogSource(self.job_dir(name) / "output.log")

    def _write_slots(self, name: str, spec: TrainingJobSpec) -> None:
        """One etcd slot per initial worker; the job's discovery reads them while it runs."""
        try:
            if not self.etcd:
                raise EtcdError(f"no etcd endpoint configured (set {ETCD_ENV} or the connection's etcd extra)")
            write_slots(EtcdKV(self.etcd), name, spec.num_workers)
        except EtcdError as exc:
            shutil.rmtree(self.job_dir(name), ignore_errors=True)
            raise JobSubmissionError(f"min_workers/max_workers: could not write the worker slots: {exc}") from None

    def _image_for(self, spec: TrainingJobSpec) -> str:
        return spec.image or self.image or sys.prefix

    def _status_or_none(self, name: str, missing: JobState) -> JobStatus:
        try:
            return self.status(name)
        except JobNotFound:
            return JobStatus(missing)

    def _launcher_alive(self, name: str, launcher: dict) -> bool:
        self._reap(name)
        try:
            proc = psutil.Process(launcher["pid"])
            return proc.create_time() == launcher["create_time"] and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def _reap(self, name: str) -> None:
        """Collect our own launcher child once it exits, so it does not linger as a zombie."""
        if (proc := self._launchers.get(name)) is not None and proc.poll() is not None:
            del self._launchers[name]

    @staticmethod
    def _archive(job_dir: Path) -> None:
        """Keep a finished job's record and logs beside the new one instead of overwriting them."""
        for attempt in range(1, 10_000):
            target = job_dir.with_name(f"{job_dir.name}.{attempt}")
            if not target.exists():
                try:
                    job_dir.rename(target)
                except FileNotFoundError:  # another submitter archived it first
                    pass
                return


def job_processes(uid: str) -> list[psutil.Process]:
    """Every live process of the job: the launcher and whatever it started, however deep, found by
    the marker in their environment (horovodrun's middlemen start new sessions, so process groups
    alone do not reach every worker)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(JOB_UID_ENV) == uid:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _terminate(find, grace_s: float) -> None:
    """SIGTERM every process, SIGKILL what is left after the grace period; repeat for late children."""
    for _ in range(3):
        procs = find()
        if not procs:
            return
        for proc in procs:
            _signal(proc, signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=grace_s)
        for proc in alive:
            _signal(proc, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=5)


def _signal(proc: psutil.Process, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except psutil.NoSuchProcess:
        pass


def _is_elastic_horovod(spec: TrainingJobSpec) -> bool:
    return spec.elastic and spec.framework is Framework.HOROVOD


def _check_image(spec: TrainingJobSpec, image: str) -> None:
    """Fail at submit, with the fix in the message, when the environment cannot run the job."""
    bin_dir = Path(image) / "bin"
    if not bin_dir.is_dir():
        raise JobSubmissionError(f"image: {image!r} is not a Python environment (no bin/ directory)")
    if spec.framework is Framework.HOROVOD and not (bin_dir / "horovodrun").exists():
        raise JobSubmissionError(
            f"image: no horovodrun in {bin_dir}; the local backend needs a training environment with "
            "Horovod installed (run `make training-env`, then point the image at .venv-train)"
        )


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return None


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
