"""The embedded default backend: a job is a group of processes on this machine, needing no cluster.

Each job's workers run in a sandbox of their own (``local_sandbox``: bubblewrap) that shows them neither the
records below, nor ``$AIRFLOW_HOME``, nor any other process or job: only the launcher (outside the sandbox)
and the submitter write a job's records. Where no sandbox can be made a job is refused, naming why, unless
the deployment opts out (``sandbox=auto``: warn once and run unsandboxed; ``off``): the machine is then
single-tenant.

Each job lives in ``<root>/jobs/<name>/`` (0700, every record in it 0600): ``job.json`` (the spec, the
launch plan and the owner token, an HMAC of the name and attempt with the key in ``<root>/owner.key``:
a record that does not verify was planted and is refused, naming it; never a secret), ``launcher.json`` (the launcher process), ``heartbeat`` (the
followers' lease), ``output.log`` (every worker's lines, prefixed by rank), ``status.json`` (written
once the job ends) and ``cancelled`` (a marker). The launcher runs in its own session, detached from
the Airflow task, so a restarted task finds the job still running and attaches to it. How a job ends
(its deadline, the orphan lease) and which state it records: see ``local_launcher``.

Submitting is serialized per name by ``flock`` on ``<root>/locks/<name>.lock``: under it a submitter
re-reads the job's state, stops what a finished job left running (the workers of a killed launcher),
archives it as ``<name>.N`` and starts the new one, so of two concurrent submitters exactly one starts
a job and the other attaches. The lock also tells an abandoned submission (a job directory with no
launcher, and nobody holding the lock) from one still in progress. Waiting for it is bounded
(``lock_timeout_s``), with an error naming the lock.
"""

from __future__ import annotations

import ast
import asyncio
import fcntl
import functools
import hmac
import json
import logging
import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psutil

from airflow_ml_provider.jobs.backends.base import (
    Backend,
    BackendAccessError,
    JobNotFound,
    JobSubmissionError,
)
from airflow_ml_provider.jobs.backends.local import egress as local_egress
from airflow_ml_provider.jobs.backends.local import launcher_server
from airflow_ml_provider.jobs.backends.local import sandbox as local_sandbox
from airflow_ml_provider.jobs.backends.local import workdirs as local_workdirs
from airflow_ml_provider.jobs.backends.local.common import (
    JOB_UID_ENV,
    NEVER_LAUNCHED_STATUS,
    allowed_env,
    job_processes,
    mkdir_private,
    open_private,
    owner_token,
    read_json,
    submission_lock,
    terminate,
    write_json,
    write_private,
)
from airflow_ml_provider.jobs.backends.local.launcher import launch_plan
from airflow_ml_provider.jobs.backends.local.sandbox import SandboxLimits, SandboxMode
from airflow_ml_provider.jobs.spec import Framework, TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState, JobStatus
from airflow_ml_provider.logs.files import FileLogSource
from airflow_ml_provider.runtime.etcd_kv import EtcdError, EtcdKV
from airflow_ml_provider.runtime.local_discovery import ETCD_ENV, slots_prefix, write_slots

__all__ = ["JOB_UID_ENV", "LocalBackend", "SandboxMode", "job_processes"]

# A job name becomes a directory name: no separators, no "..", nothing hidden.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[4])  # where the launcher and the rank shim are read from
_log = logging.getLogger(__name__)
_FAST_POLL_S = 0.05  # how often statuses() looks for the end of a job between full status reads
_LOCK_POLL_S = 0.05  # how often a waiter tries a job name's lock again


class ForgedJobRecord(BackendAccessError):
    """A job directory whose record this backend did not write: refused, never attached to."""


WORKERS_PER_CPU = 4  # the default bound of one local job's worker processes, per CPU of the machine


class LocalBackend(Backend):
    """Runs jobs as local process groups: ``horovodrun`` on localhost, or N socket-connected workers.

    Args:
        root: directory for job records and default artifacts.
        image: default Python environment prefix for workers (a spec's ``image`` overrides it);
            None means this interpreter's environment.
        cancel_grace_s: seconds between SIGTERM and SIGKILL when cancelling or stopping a job.
        etcd: etcd endpoint holding elastic jobs' worker slots (default: ``$AIRFLOW_ML_ETCD``); a job's
            slots are ``/airflow-ml/jobs/<name>/slots/<n>`` keys, and adding one adds a worker.
        orphan_grace_s: the launcher stops (CANCELLED) a job whose followers have not called
            ``heartbeat`` for this long: long enough for Airflow to notice a dead task and a retry to
            attach. None: never.
        max_workers: the most worker processes one job may start on this machine (an elastic job: its
            ``max_workers``); default ``WORKERS_PER_CPU`` x the CPU count. A job asking for more is refused
            before any process starts.
        sandbox: ``required`` (default): each job in its own sandbox (``local_sandbox``), a job that cannot
            have one refused at submit naming why; ``auto``: sandboxed where bubblewrap works, else unsandboxed
            with a warning (once per backend, i.e. per task); ``off``: never (a single-tenant machine).
        lock_timeout_s: how long ``submit``/``delete`` wait for a job name's lock before giving up with
            an error naming it.
        hide: more paths a sandboxed job must not see, besides ``$AIRFLOW_HOME``, ``$AIRFLOW_CONFIG`` and
            the root (``TrainingBackendHook`` adds Airflow's configured SQLite DB, logs and secrets files).
        limits: each sandboxed job's memory, processes, ``/tmp`` size and the endpoints it may reach
            (``SandboxLimits``; the hook reads them from ``[ml_training]`` and the connection).
    """

    name = "local"
    shards = True  # runs sharded jobs (jobs.shards): its launcher is the job's queue (local_sharded)
    roles = True  # runs jobs of several roles (jobs.roles): a process group per role (local_roles)

    def __init__(self, root: str | os.PathLike, image: str | None = None, cancel_grace_s: float = 10.0,
                 etcd: str | None = None, orphan_grace_s: float | None = 600.0, max_workers: int | None = None,
                 sandbox: SandboxMode | str = SandboxMode.REQUIRED, lock_timeout_s: float = 120.0,
                 hide: Sequence[str] = (), limits: SandboxLimits | None = None):
        if orphan_grace_s is not None and not orphan_grace_s > 0:
            raise ValueError(f"orphan_grace_s: must be a positive number of seconds (got {orphan_grace_s!r})")
        if max_workers is not None and not max_workers >= 1:
            raise ValueError(f"max_workers: must be at least 1 (got {max_workers!r})")
        self.max_workers = max_workers or WORKERS_PER_CPU * (os.cpu_count() or 1)
        try:
            self.sandbox = SandboxMode(sandbox)
        except ValueError:
            raise ValueError(f"sandbox: must be one of {[m.value for m in SandboxMode]} (got {sandbox!r})") from None
        self._warned = False
        self.lock_timeout_s = lock_timeout_s
        self.hide = [str(path) for path in hide if path]
        self.limits = limits or SandboxLimits()
        self.root = Path(root)
        self.image = image
        self.cancel_grace_s = cancel_grace_s
        self.etcd = etcd or os.environ.get(ETCD_ENV) or None
        self.orphan_grace_s = orphan_grace_s

    def job_dir(self, name: str) -> Path:
        if not _NAME.match(name) or ".." in name:
            raise ValueError(f"job name: {name!r} is not a valid local job name (letters, digits, '.', '_', "
                             "'-'; starting with a letter or digit; no '..')")
        return self.root / "jobs" / name

    def default_artifact_dir(self, name: str) -> str:
        return str(self.root / "artifacts" / name)

    def render(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> str:
        plan = launch_plan(spec, self._image_for(spec), self.job_dir(name), self.etcd)
        plan["sandbox"] = self._sandbox(name, spec, self._image_for(spec), "0" * 32)
        return json.dumps({"name": name, "labels": labels, **plan}, indent=2)

    def submit(self, name: str, spec: TrainingJobSpec, labels: dict[str, str],
               secrets: dict[str, str] | None = None) -> bool:
        """Also takes ``secrets``: variables for the workers' environment that are never written to
        disk (handed to the launcher on its stdin; not in ``job.json``, not in ``render``)."""
        self._check_workers(spec)
        image = self._image_for(spec)
        _check_image(spec, image)
        secrets = _checked_secrets(secrets)
        job_dir = self.job_dir(name)
        for directory in (self.root, job_dir.parent, self.root / "locks"):
            _ensure_private_dir(directory)
        _ensure_shared_dir(self.root / "data")
        with self._claim(name):
            if job_dir.is_dir():
                try:
                    self._record(name)
                except ForgedJobRecord as exc:
                    raise JobSubmissionError(str(exc)) from None
                if not self._ended_under_claim(name):
                    return False
                self._stop_leftovers(job_dir)
                self._archive(job_dir)
            mkdir_private(job_dir)
            uid = uuid.uuid4().hex
            try:
                plan = launch_plan(spec, image, job_dir, self.etcd)
                plan["sandbox"] = self._sandbox(name, spec, image, uid)
                if plan["sandbox"]:
                    self._prepare_directories(spec, plan["sandbox"])
                if _is_elastic_horovod(spec):
                    self._write_slots(name, spec)
            except (ValueError, OSError, JobSubmissionError) as exc:
                shutil.rmtree(job_dir, ignore_errors=True)
                raise JobSubmissionError(str(exc)) from None
            record = {"name": name, "uid": uid, "owner": owner_token(self.root, name, uid), "labels": labels, "image": image, "submitted_at": time.time(),
                      "etcd": self.etcd, "cancel_grace_s": self.cancel_grace_s,
                      "orphan_grace_s": self.orphan_grace_s, "spec": spec.model_dump(mode="json"), "plan": plan}
            write_json(job_dir / "job.json", record)  # before the launcher, which reads it
            write_private(job_dir / "heartbeat", "")  # the lease starts with the submission
            self._start_launcher(name, job_dir, uid, secrets)
        return True

    def status(self, name: str) -> JobStatus:
        job_dir = self.job_dir(name)
        if not job_dir.is_dir():
            raise JobNotFound(f"no local job {name!r} under {self.root}")
        if self._record(name) is None:  # a submitter between creating the directory and the record, or one that died
            return JobStatus(JobState.PENDING, "launching") if self._submission_in_progress(name) else NEVER_LAUNCHED_STATUS
        if (job_dir / "cancelled").exists():
            return JobStatus(JobState.CANCELLED, (job_dir / "cancelled").read_text().strip() or "cancelled")
        if (final := read_json(job_dir / "status.json")) is not None:
            return JobStatus.from_dict(final)
        launcher = read_json(job_dir / "launcher.json")
        if launcher is None:
            if self._submission_in_progress(name):
                return JobStatus(JobState.PENDING, "launching")
            launcher = read_json(job_dir / "launcher.json")  # the submitter may have finished just now
            if launcher is None:
                if (final := read_json(job_dir / "status.json")) is not None:
                    return JobStatus.from_dict(final)
                return NEVER_LAUNCHED_STATUS
        if self._launcher_alive(name, launcher):
            return JobStatus(JobState.RUNNING)
        if (final := read_json(job_dir / "status.json")) is not None:  # it finished just now
            return JobStatus.from_dict(final)
        return JobStatus(
            JobState.PREEMPTED,
            "the launcher was killed from outside before the job finished (machine restart, OOM killer or "
            "a signal); see launcher.log in " + str(job_dir),
        )

    async def statuses(self, name: str, interval: float) -> AsyncIterator[JobStatus]:
        """Like the default, but notices the end of a job as its launcher exits (a pidfd of the launcher,
        readable once it has written the job's status; on a system without pidfds, a stat of the end
        markers every 50 ms) instead of up to ``interval`` later, so a follower finishes as soon as the job
        does. Once an ended status has been given, it comes again every ``interval`` like any other: a
        follower that goes on after the end (draining the job's log from Elasticsearch) must not be woken
        in a loop."""
        job_dir = self.job_dir(name)
        loop = asyncio.get_running_loop()
        launcher_exit = None
        try:
            while True:
                status = await asyncio.to_thread(self.status, name)
                yield status
                if status.state.is_terminal:  # nothing left to notice early
                    await asyncio.sleep(interval)
                    continue
                if launcher_exit is None and status.state is JobState.RUNNING:
                    launcher_exit = _LauncherExit.open(read_json(job_dir / "launcher.json"))
                if launcher_exit is not None and not launcher_exit.exited:
                    await launcher_exit.wait(interval)
                    continue  # (once it has exited, the stat below: a status not yet final is never a busy loop)
                deadline = loop.time() + interval
                while loop.time() < deadline and not _ended(job_dir):
                    await asyncio.sleep(min(_FAST_POLL_S, max(0.0, deadline - loop.time())))
        finally:
            if launcher_exit is not None:
                launcher_exit.close()

    def heartbeat(self, name: str) -> None:
        """Renew the job's lease (see ``orphan_grace_s``); a no-op for an unknown or deleted job."""
        try:
            os.utime(self.job_dir(name) / "heartbeat")
        except FileNotFoundError:
            pass

    def cancel(self, name: str, reason: str = "cancelled") -> None:
        job_dir = self.job_dir(name)
        try:
            record = self._record(name)
        except ForgedJobRecord as exc:
            _log.warning("Not cancelling: %s", exc)
            return
        if record is None:
            return
        if not self._status_or_none(name, JobState.CANCELLED).state.is_terminal:
            _mark_cancelled(job_dir, reason)
        terminate(lambda: self._processes(job_dir, record), self.cancel_grace_s)

    def delete(self, name: str) -> None:
        with self._claim(name):
            self.cancel(name, "deleted")
            try:
                record = self._record(name)
            except ForgedJobRecord:
                record = None
            if record and record.get("etcd") and _is_elastic_horovod(TrainingJobSpec(**record["spec"])):
                EtcdKV(record["etcd"]).delete_prefix(slots_prefix(name))
            shutil.rmtree(self.job_dir(name), ignore_errors=True)

    def log_source(self, name: str) -> FileLogSource:
        return FileLogSource(self.job_dir(name) / "output.log")

    @contextmanager
    def _claim(self, name: str) -> Iterator[None]:
        """Exclusive per-name lock across processes and threads (flock on a file of its own)."""
        _ensure_private_dir(self.root)
        _ensure_private_dir(self.root / "locks")
        fd = open_private(self._lock_path(name), append=True)
        try:
            deadline = time.monotonic() + self.lock_timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise JobSubmissionError(
                            f"job {name!r}: its lock {self._lock_path(name)} has been held by another process for "
                            f"{self.lock_timeout_s:g} s (lock_timeout_s); another submitter of this job is stuck, or "
                            "something else holds the file") from None
                    time.sleep(_LOCK_POLL_S)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _record(self, name: str) -> dict | None:
        """The job's ``job.json`` once its owner token proves this backend's submitter wrote it; None if
        there is none (yet).

        Raises:
            ForgedJobRecord: a record that the owner key did not sign (planted or altered).
        """
        path = self.job_dir(name) / "job.json"
        try:
            record = read_json(path)
        except ValueError:
            record = {}
        if record is None:
            return None
        owner = record.get("owner")
        uid = record.get("uid")
        if not (isinstance(owner, str) and isinstance(uid, str)
                and hmac.compare_digest(owner, owner_token(self.root, name, uid))):
            raise ForgedJobRecord(
                f"{path}: this job record was not written by this backend's submitter (its owner token does not "
                "verify): refusing to attach to it, trust its state or stop its processes; remove "
                f"{path.parent} once you know where it came from")
        return record

    def _lock_path(self, name: str) -> Path:
        return submission_lock(self.job_dir(name))

    def _submission_in_progress(self, name: str) -> bool:
        """Someone holds the name's lock (a submitter between creating the job and starting it)."""
        try:
            fd = os.open(self._lock_path(name), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    def _ended_under_claim(self, name: str) -> bool:
        """Whether the existing job may be archived. Under the lock, a job with neither a launcher nor a
        status was abandoned by a submitter that died: nobody else can be submitting it."""
        job_dir = self.job_dir(name)
        if not (job_dir / "launcher.json").exists() and not (job_dir / "status.json").exists():
            return True
        return self.status(name).state.is_terminal

    def _start_launcher(self, name: str, job_dir: Path, uid: str, secrets: dict[str, str]) -> None:
        """Have the root's warm launcher fork the job's launcher (``launcher_server``) with a minimal environment
        (none of the Airflow process's secrets), then complete the submission by writing the secrets to its stdin
        and closing it."""
        env = allowed_env(os.environ) | {JOB_UID_ENV: uid}
        if "PYTHONPATH" in os.environ:  # how this interpreter found the package, if not installed
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        secrets_in, secrets_out = os.pipe()
        log_fd = open_private(job_dir / "launcher.log", append=True)
        try:
            pid = launcher_server.start_launcher(self.root, job_dir, env, secrets_in, log_fd)
        except OSError as exc:
            os.close(secrets_out)
            shutil.rmtree(job_dir, ignore_errors=True)
            raise JobSubmissionError(f"could not start the local launcher: {exc}") from None
        finally:
            os.close(secrets_in)
            os.close(log_fd)
        write_json(job_dir / "launcher.json", {"pid": pid, "create_time": _create_time(pid)})
        try:
            with os.fdopen(secrets_out, "wb") as stdin:
                stdin.write(json.dumps({"secrets": secrets}).encode())
        except BrokenPipeError:  # it died before reading (a broken environment)
            write_json(job_dir / "status.json", JobStatus(
                JobState.FAILED, f"the launcher exited before starting the job; see {job_dir}/launcher.log",
            ).to_dict())

    def _write_slots(self, name: str, spec: TrainingJobSpec) -> None:
        """One etcd slot per initial worker; the job's discovery reads them while it runs."""
        try:
            if not self.etcd:
                raise EtcdError(f"no etcd endpoint configured (set {ETCD_ENV} or the connection's etcd extra)")
            write_slots(EtcdKV(self.etcd), name, spec.num_workers)
        except EtcdError as exc:
            raise JobSubmissionError(f"min_workers/max_workers: could not write the worker slots: {exc}") from None

    def _check_workers(self, spec: TrainingJobSpec) -> None:
        """A job never starts more processes than this machine's bound (checked before anything starts)."""
        asked = max(spec.num_workers, spec.max_workers or 0) * spec.nproc_per_node
        if asked > self.max_workers:
            field = "max_workers" if spec.max_workers and spec.max_workers > spec.num_workers else "num_workers"
            raise JobSubmissionError(
                f"{field}: {asked} workers is more than the {self.max_workers} one local job may start on this "
                f"machine ({os.cpu_count()} CPUs; the bound is [ml_training] local_max_workers, by default "
                f"{WORKERS_PER_CPU} x the CPU count)"
            )

    def _sandbox(self, name: str, spec: TrainingJobSpec, image: str, attempt: str) -> dict | None:
        """The job's sandbox (mounts, user, bounds, egress), or None to run it unsandboxed (see ``sandbox``)."""
        if self.sandbox is SandboxMode.OFF:
            return None
        if (why := local_sandbox.unavailable()) is not None:
            if self.sandbox is SandboxMode.REQUIRED:
                raise JobSubmissionError(
                    f"sandbox: required, but {why}. On a machine where every job is as trusted as the DAG authors, "
                    "set the ml_training connection's local_sandbox extra to 'auto' (warn and run unsandboxed) or 'off'")
            if not self._warned:
                self._warned = True
                _log.warning("Local jobs run unsandboxed: %s. Their processes see this machine's other processes "
                             "and files as the Airflow worker does (the local backend is then single-tenant: recipe "
                             "authors and jobs must be as trusted as DAG authors).", why)
            return None
        uid = local_sandbox.job_uid(attempt)
        hidden = local_sandbox.hidden_paths(self.root, extra=self.hide)
        data = os.path.realpath(self.root / "data")
        writable = [(field, path) for field in ("model_dir", "checkpoint_dir")
                    if (path := getattr(spec, field)) and "://" not in path]
        for path in (path for path in spec.output_dirs if "://" not in path):
            if not local_sandbox.inside(path, [data]) or os.path.realpath(path) == data:
                raise JobSubmissionError(f"output_dirs: {path!r} is in a place jobs may not write; a job's output "
                                         f"directories lie under {data}")
            writable.append(("output_dirs", path))
        needed = [path for path in (image, _interpreter_prefix(image), sys.prefix, sys.base_prefix, _PACKAGE_ROOT,
                                    spec.working_dir, *_editable_sources(image)) if path]
        closed = local_sandbox.closed_ancestors(needed) if uid is not None else []
        unseen = [*hidden, local_sandbox.PRIVATE_TMP, *closed]  # e.g. a training environment installed under /tmp
        inputs = [path for path in needed if local_sandbox.inside(path, unseen)] + [data]
        artifacts = [os.path.realpath(self.root / "artifacts")]
        try:
            for path in (path for path in spec.inputs if "://" not in path and local_sandbox.inside(path, unseen)):
                if local_sandbox.inside(path, hidden) and not local_sandbox.inside(path, [*artifacts, data]):
                    raise ValueError(f"inputs: {path!r} is in a place jobs may not see; a job reads other jobs' "
                                     f"files only under {artifacts[0]}")  # never a record or a secret
                if local_sandbox.inside(path, [self.root]):  # written by another job: shown as it is, no link
                    path = local_workdirs.linkless(path, str(self.root), "inputs")
                inputs.append(path)
            sandbox = local_sandbox.mounts(name, hidden, writable, inputs, uid)
            discovery = [self.etcd] if _is_elastic_horovod(spec) and self.etcd else []
            for value in discovery:  # (the configured egress was checked by SandboxLimits)
                local_egress.endpoint(value, "etcd")
            egress = [*self.limits.egress, *discovery]
        except ValueError as exc:
            raise JobSubmissionError(str(exc)) from None
        if unseen := local_sandbox.unseen_arguments(spec.command, sandbox):
            _log.warning("Job %s names %s under /tmp, which it will not see: each local job has a /tmp of its "
                         "own. Put such files under %s, or name them in the job's inputs.",
                         name, ", ".join(unseen), self.root / "data")
        return {**sandbox, "tmp_bytes": self.limits.tmp_mb * 2**20, "egress": egress,
                "bounds": {"memory_bytes": self.limits.memory_mb * 2**20, "max_processes": self.limits.max_processes}}

    @staticmethod
    def _prepare_directories(spec: TrainingJobSpec, sandbox: dict) -> None:
        """Each writable directory of a sandboxed job made for the attempt (under the name's lock, the previous
        attempt stopped): its own handed to the attempt's user with what that attempt left there (its
        checkpoints), its output directories open to the run's jobs; an output directory a sharded job commits
        its shards in is its own too (a resubmitted attempt, of another user, writes beside the shards that
        earlier attempts committed)."""
        own = {str(local_workdirs.real_directory(path, field)): field for field in ("model_dir", "checkpoint_dir")
               if (path := getattr(spec, field)) and "://" not in path}  # (as mounts() resolved them)
        shards = spec.shards.output if spec.shards is not None and "://" not in spec.shards.output else None
        for path in spec.output_dirs if shards else ():
            real = str(local_workdirs.real_directory(path, "output_dirs"))
            if local_sandbox.inside(shards, [real]):
                own[real] = "output_dirs"
        for path in sandbox["writable"]:
            if path in own:
                local_workdirs.own_tree(path, own[path], sandbox["uid"])
            else:
                local_workdirs.shared_directory(path, "output_dirs")

    def _image_for(self, spec: TrainingJobSpec) -> str:
        return spec.image or self.image or sys.prefix

    def _status_or_none(self, name: str, missing: JobState) -> JobStatus:
        try:
            return self.status(name)
        except JobNotFound:
            return JobStatus(missing)

    def _launcher_alive(self, name: str, launcher: dict) -> bool:
        return _launcher_process(launcher) is not None

    @staticmethod
    def _processes(job_dir: Path, record: dict) -> list:
        """Every live process of the job: its launcher (forked by the warm launcher, so its environment in /proc
        is the server's: named by ``launcher.json``) and whatever it started (by the job's marker)."""
        found = job_processes(record["uid"])
        launcher = read_json(job_dir / "launcher.json")
        if launcher and (proc := _launcher_process(launcher)) is not None and all(p.pid != proc.pid for p in found):
            found.append(proc)
        return found

    def _stop_leftovers(self, job_dir: Path) -> None:
        """Stop whatever the ended attempt left running before a new one takes its name: the workers of
        an attempt whose launcher was killed (PREEMPTED) outlive it, with no watchdog left to enforce
        their lease or deadline. Called under the name's lock."""
        if (record := self._record(job_dir.name)) is not None:
            terminate(lambda: self._processes(job_dir, record), self.cancel_grace_s)

    @staticmethod
    def _archive(job_dir: Path) -> None:
        """Keep a finished job's record and logs beside the new one instead of overwriting them
        (called under the name's lock, so the first free number stays free until the rename)."""
        attempt = 1
        while job_dir.with_name(f"{job_dir.name}.{attempt}").exists():
            attempt += 1
        job_dir.rename(job_dir.with_name(f"{job_dir.name}.{attempt}"))


class _LauncherExit:
    """A pidfd of a job's launcher (Linux 5.3+): readable once the launcher has exited, which it does right
    after writing the job's status, or when a cancel stops it: the end wakes its follower at once."""

    def __init__(self, fd: int):
        self.fd, self.exited = fd, False

    @classmethod
    def open(cls, launcher: dict | None) -> _LauncherExit | None:
        """None where there is no pidfd to wait on (no ``os.pidfd_open``, the launcher gone already)."""
        if not launcher or not hasattr(os, "pidfd_open"):
            return None
        try:
            fd = os.pidfd_open(launcher["pid"])
        except OSError:
            return None
        try:  # the pid is the launcher's, not a later process's that reused it
            if psutil.Process(launcher["pid"]).create_time() == launcher["create_time"]:
                return cls(fd)
        except psutil.Error:
            pass
        os.close(fd)
        return None

    async def wait(self, timeout: float) -> None:
        """Until the launcher exits, or ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        exited = loop.create_future()
        loop.add_reader(self.fd, lambda: exited.done() or exited.set_result(None))
        try:
            await asyncio.wait_for(exited, timeout)
            self.exited = True
        except TimeoutError:
            pass
        finally:
            loop.remove_reader(self.fd)

    def close(self) -> None:
        os.close(self.fd)


def _ended(job_dir: Path) -> bool:
    return (job_dir / "status.json").exists() or (job_dir / "cancelled").exists()


def _mark_cancelled(job_dir: Path, reason: str) -> None:
    """Leave the ``cancelled`` marker; on a full disk an empty one (it needs no data block), so that a
    cancel still stops the job and reads as CANCELLED."""
    try:
        write_private(job_dir / "cancelled", reason + "\n")
    except OSError:
        os.close(open_private(job_dir / "cancelled"))


def _ensure_shared_dir(path: Path) -> None:
    """``<root>/data``: every job reads the runs' shards there, as a user of its own (0755; no job writes it)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o755)


def _ensure_private_dir(path: Path) -> None:
    """Create ``path`` 0700 (its parents normally) if missing; an existing directory is left as is."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mkdir_private(path)
    except FileExistsError:
        pass


def _checked_secrets(secrets: dict[str, str] | None) -> dict[str, str]:
    """Names must be variable names and values strings without NUL; errors never show a value."""
    checked = {}
    for key, value in (secrets or {}).items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise JobSubmissionError(f"secrets: {key!r} is not a valid environment variable name")
        if not isinstance(value, str) or "\0" in value:
            raise JobSubmissionError(f"secrets: the value of {key} must be a string without NUL bytes")
        checked[key] = value
    return checked


def _is_elastic_horovod(spec: TrainingJobSpec) -> bool:
    return spec.elastic and spec.framework is Framework.HOROVOD


def _check_image(spec: TrainingJobSpec, image: str) -> None:
    """Fail at submit, with the fix in the message, when the environment cannot run the job."""
    if not os.path.isabs(image):  # else it would be found (or not) relative to whatever directory submits
        raise JobSubmissionError(f"image: {image!r} is not an absolute path; the local backend's image is the "
                                 "prefix of a Python environment, e.g. /opt/venvs/train")
    bin_dir = Path(image) / "bin"
    if not bin_dir.is_dir():
        raise JobSubmissionError(f"image: {image!r} is not a Python environment (no bin/ directory)")
    if spec.framework is Framework.HOROVOD and not (bin_dir / "horovodrun").exists():
        raise JobSubmissionError(
            f"image: no horovodrun in {bin_dir}; the local backend needs a training environment with "
            "Horovod installed (run `make training-env`, then point the image at .venv-train)"
        )
    if spec.framework is Framework.PYTORCH and not (bin_dir / "torchrun").exists():
        raise JobSubmissionError(
            f"image: no torchrun in {bin_dir}; the local backend needs a training environment with "
            "PyTorch installed (run `make training-env`, then point the image at .venv-train)"
        )


def _editable_sources(image: str) -> list[str]:
    """The source folders of the image's editable installs (``pip install -e``), which its ``site-packages`` only
    points at: a ``.pth`` line naming a folder, or a package of the ``MAPPING`` of setuptools'
    ``__editable___*_finder.py`` (the package folder alone, not the checkout around it). A job reads them
    read-only like the image itself; a checkout under ``/tmp`` would else be hidden with it."""
    files = [(str(path), path.stat().st_mtime_ns) for site in Path(image).glob("lib/python*/site-packages")
             for path in (*site.glob("*.pth"), *site.glob("__editable___*_finder.py"))]
    return [path for path in _sources_named(tuple(files)) if os.path.isdir(path)]


@functools.lru_cache(maxsize=32)
def _sources_named(files: tuple[tuple[str, int], ...]) -> tuple[str, ...]:
    """What the files name (parsed once per file and version: every submission asks)."""
    sources: list[str] = []
    for name, _mtime in files:
        text = Path(name).read_text(errors="replace")
        if name.endswith(".pth"):
            sources += [line for line in text.splitlines() if line.startswith("/")]
            continue
        for node in ast.parse(text).body:
            if isinstance(node, ast.AnnAssign | ast.Assign) and "MAPPING" in ast.unparse(node).split("=")[0]:
                sources += list(ast.literal_eval(node.value).values())
    return tuple(sources)


def _interpreter_prefix(image: str) -> str | None:
    """Where the image's Python really lives (a virtual environment's ``bin/python`` links to its base)."""
    python = Path(image) / "bin" / "python"
    return str(Path(os.path.realpath(python)).parent.parent) if python.exists() else None


def _launcher_process(launcher: dict) -> psutil.Process | None:
    """The live launcher ``launcher.json`` names: its pid, unless a later process took it (its start time differs)
    or it is a zombie."""
    try:
        proc = psutil.Process(launcher["pid"])
        if proc.create_time() == launcher["create_time"] and proc.status() != psutil.STATUS_ZOMBIE:
            return proc
    except psutil.NoSuchProcess:
        pass
    return None


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return None
