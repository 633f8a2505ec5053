"""What the local backend's submitter and its launcher share: private job records and their owner token,
the environment allow-list, and finding (and stopping) every process of a job.

Kept to the standard library and the state module (psutil is imported only where processes are
searched) because the launcher imports it at every job start.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from airflow_ml_provider.jobs.state import NEVER_LAUNCHED, JobState, JobStatus

JOB_UID_ENV = "AIRFLOW_ML_JOB_UID"  # set in every process of a job: how cancel finds them all
# A job whose submitter died before completing the submission: nothing ran.
NEVER_LAUNCHED_STATUS = JobStatus(JobState.FAILED, "the job was never launched: its submitter died mid-submit",
                                  reason=NEVER_LAUNCHED)

# The only variables of the Airflow process a launcher or worker inherits: what a program needs to
# run (search path, home, locale, time zone, temp dir, user). Everything else (AIRFLOW_CONN_*, the
# Fernet key, cloud and MLflow credentials) stays behind; a job's own variables come from its spec.
_ALLOWED = frozenset({"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME"})
_ALLOWED_PREFIXES = ("LC_",)


def allowed_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed subset of ``environ``."""
    return {k: v for k, v in environ.items() if k in _ALLOWED or k.startswith(_ALLOWED_PREFIXES)}


def mkdir_private(path: Path) -> None:
    """Create ``path`` (not its parents) as 0700 whatever the umask; FileExistsError if it exists."""
    os.mkdir(path, 0o700)
    os.chmod(path, 0o700)


def open_private(path: Path, append: bool = False) -> int:
    """A file descriptor on ``path``, created 0600 whatever the umask (truncated unless ``append``)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)
    return fd


def write_private(path: Path, text: str) -> None:
    """Atomically replace ``path`` with ``text``, 0600 (readers never see a partial file)."""
    tmp = path.with_name(_private_name(path.name))
    try:
        with os.fdopen(open_private(tmp), "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk leaves no stray temporary file
        raise


def _private_name(name: str) -> str:
    """A temporary file's name beside ``name`` that no other process or thread writing it at once uses."""
    return f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"


def write_json(path: Path, data: dict) -> None:
    write_private(path, json.dumps(data, indent=1))


def submission_lock(job_dir: Path) -> Path:
    """The file whose ``flock`` serializes the submissions of the job in ``job_dir`` (``<root>/jobs/<name>``):
    ``<root>/locks/<name>.lock``. Its holder may archive the directory and start a new job under the name."""
    return job_dir.parent.parent / "locks" / f"{job_dir.name}.lock"


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def owner_token(root: Path, name: str, uid: str) -> str:
    """The proof that the submitter of job ``name`` (attempt ``uid``) held the backend's owner key: an HMAC
    with the key in ``<root>/owner.key`` (0600, created on first use), which no sandboxed job can see. (Its
    modules are imported here: the launcher, which imports this module at every job's start, signs nothing.)"""
    import hashlib
    import hmac

    return hmac.new(_owner_key(root), f"{name}\0{uid}".encode(), hashlib.sha256).hexdigest()


def _owner_key(root: Path) -> bytes:
    path = root / "owner.key"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    import secrets

    tmp = path.with_name(_private_name(path.name))
    fd = open_private(tmp)
    try:
        os.write(fd, secrets.token_bytes(32))
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # atomic, and never replaces a key another submitter made first
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_bytes()


def job_processes(uid: str, exclude: int | None = None) -> list:
    """Every live process of the job (psutil.Process): the launcher and whatever it started, however
    deep, found by the marker in their environment (horovodrun's middlemen start new sessions, so
    process groups alone do not reach every worker). ``exclude``: a pid to leave out (the caller)."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != exclude and proc.environ().get(JOB_UID_ENV) == uid:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def terminate(find: Callable[[], list], grace_s: float) -> None:
    """SIGTERM every process, SIGKILL what is left after the grace period; repeat for late children.
    A sandbox's own processes (bubblewrap) get no SIGTERM, which would end their sandbox at once, taking
    the workers' grace away: they are SIGKILLed after it, and with them goes every process left in their
    PID namespace, marker or not. Waits by polling, never by waitpid, so the caller's own children stay
    for their Popen to collect."""
    for _ in range(3):
        procs = find()
        if not procs:
            return
        for proc in procs:
            if not is_sandbox_process(proc):
                signal_process(proc, signal.SIGTERM)
        alive = _wait_gone(procs, grace_s)
        for proc in alive:
            signal_process(proc, signal.SIGKILL)
        _wait_gone(alive, 5)


def is_sandbox_process(proc) -> bool:
    """Whether ``proc`` (psutil.Process) is bubblewrap, which holds a job's sandbox."""
    import psutil

    try:
        return proc.name() == "bwrap"
    except psutil.Error:
        return False


def _wait_gone(procs: list, timeout: float) -> list:
    """The processes still there when all are gone or ``timeout`` passed. A zombie of another parent
    counts until reaped (so its process group is gone too); our own zombie child counts as gone."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [proc for proc in procs if _alive(proc)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


def _alive(proc) -> bool:
    import psutil

    try:
        return proc.status() != psutil.STATUS_ZOMBIE or proc.ppid() != os.getpid()
    except psutil.NoSuchProcess:
        return False


def signal_process(proc, sig: int) -> None:
    """Send ``sig`` to ``proc`` (psutil.Process), if it is still there."""
    import psutil

    try:
        proc.send_signal(sig)
    except psutil.NoSuchProcess:
        pass
