"""The local backend's launcher: runs one job's workers, merges their output by rank, records the end.

``LocalBackend.submit`` computes the plan (``launch_plan``: argv, the job's variables, cwd), stores it
in ``job.json`` and has the root's warm launcher (``launcher_server``) fork a launcher that runs ``main``
in a session of its own, with an allow-listed environment (``python -m
airflow_ml_provider.jobs.backends.local.launcher JOB_DIR`` runs one by hand). On the launcher's stdin the
submitter writes the job's explicit secrets as one JSON document and closes it once the submission is
complete: a launcher that reads an incomplete document knows its submitter died mid-submit and starts
nothing. Secrets thus never touch a file. Commands are argv lists, never a shell string.

What ends a job, and the state written to ``status.json`` (always after the job's last log line):
- every worker exited 0: SUCCEEDED; one exited non-zero: FAILED, naming the first such rank;
- a worker was killed by a signal from outside (OOM killer, eviction, ``kill``): PREEMPTED;
- the launcher could not run the job (a NUL byte in argv, an unwritable ``model_dir``, a missing
  program...): FAILED with the launcher's own error, also logged as a ``[launcher]`` line;
- ``timeout_s`` passed: FAILED "deadline of N s exceeded";
- no follower renewed the job's lease for ``orphan_grace_s``: CANCELLED (see below).
The launcher stops a job by SIGTERM to every process of it (found by the job's environment marker),
then SIGKILL after ``cancel_grace_s``. A launcher killed before writing a status reads as PREEMPTED.

Orphans: every follower (operator, trigger, search) calls ``Backend.heartbeat`` at each poll, which
touches ``<job_dir>/heartbeat``; the launcher stops the job when that lease is older than
``orphan_grace_s``. The signal is a lease file rather than the submitting process's PID because the
task may defer to the triggerer and exit normally, and a retry in another process (or on another
worker) must be able to adopt the running job: no one process's life says whether the job is wanted.

Horovod ranks run under ``horovodrun``, each through ``local_output``'s shim (which ends as its rank
ended): horovodrun itself prints ``Process N exit with status code C.`` for every rank that ends
non-zero, in the order they end, and exits 0 only when every rank did; that is where per-rank exit codes
come from.

Output: every worker's output is read as bytes and passed through ``local_output.lines`` (bounded
lines, valid UTF-8, no stray line breaks) before anything forwards or stores it; in ``output.log`` a
worker's line is ``[rank N] text`` and horovodrun's own ``[horovodrun] text``: only the launcher writes
``[launcher]`` lines. A write that fails (a full disk) stops the job as FAILED with the error, the
deadline and ``cancel`` still working; the launcher keeps space in reserve to record that end.
A job its own task cancelled (``LocalBackend.cancel``) is recorded CANCELLED, not PREEMPTED; one
cancelled before its launcher ran (the cancel found no process, only left its marker) never starts.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from airflow_ml_provider.artifact_layout import TENSORBOARD_ENV, tensorboard_dir
from airflow_ml_provider.jobs import torchrun
from airflow_ml_provider.jobs.backends.local import sandbox as local_sandbox
from airflow_ml_provider.jobs.backends.local.common import (
    JOB_UID_ENV,
    NEVER_LAUNCHED_STATUS,
    allowed_env,
    is_sandbox_process,
    job_processes,
    open_private,
    read_json,
    signal_process,
    submission_lock,
    terminate,
    write_json,
)
from airflow_ml_provider.jobs.backends.local.output import lines
from airflow_ml_provider.jobs.backends.local.ports import free_ports
from airflow_ml_provider.jobs.backends.local.resources import ResourceSampler
from airflow_ml_provider.jobs.backends.local.sandboxed import JobSandbox
from airflow_ml_provider.jobs.horovodrun import horovodrun_hosts
from airflow_ml_provider.jobs.state import JobState, JobStatus
from airflow_ml_provider.runtime import quiet

_HOROVOD_LINE = re.compile(r"^\[(?P<rank>\d+)\]<(?:stdout|stderr)>:(?P<text>.*)$")
# horovodrun's print() writes this and its newline separately, so another thread's line can land in
# between ("Process 1 exit with status code 7.[0]<stdout>:...") and only the start of a line is certain.
_HOROVOD_EXIT = re.compile(r"Process (?P<rank>\d+) exit with status code (?P<code>-?\d+)\.")
_RESERVE_BYTES = 64 * 1024  # held back so that status.json can be written on a full disk
_KILL_SIGNALS = {-signal.SIGKILL, -signal.SIGTERM, 128 + signal.SIGKILL, 128 + signal.SIGTERM}


class _Interrupted(Exception):
    """The submitter died before completing the submission: the job must not start."""


_TRACEBACK = "Traceback (most recent call last):"
# horovodrun, run by the image's interpreter, without its per-run build probe where the image recorded its build
HOROVODRUN_MAIN = Path(__file__).with_name("horovodrun_main.py")
TORCHRUN_MAIN = Path(__file__).with_name("torchrun_main.py")
SHARD_RUNNER = Path(__file__).parents[3] / "runtime" / "shards.py"  # a sharded job's command, once per shard
# Starts a job's workers, ``(argv, env, cwd)`` each, as Popen-like processes: in one sandbox, or unsandboxed (a
# sharded job's also take ``stdins=``: each worker's channel to the launcher)
Start = Callable[..., list]
_STOPPING = threading.Event()  # set when the launcher stops the job (a SIGTERM: a cancel; its watchdog)


def launch_plan(spec, image: str, job_dir: Path, etcd: str | None = None) -> dict:
    """What the launcher will run for ``spec`` (a TrainingJobSpec): argv, the variables it adds to the
    workers' allow-listed environment, cwd. An elastic Horovod job discovers its slots in ``etcd``."""
    # (here: the launcher process itself needs none of these, and its start is every job's start)
    from airflow_ml_provider.jobs import shards, xgboost
    from airflow_ml_provider.jobs.backends.local import roles as local_roles
    from airflow_ml_provider.jobs.spec import Framework

    bin_dir = str(Path(image) / "bin")
    env = {
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", os.defpath),
        "VIRTUAL_ENV": image,
        "PYTHONUNBUFFERED": "1",  # lines reach the task log as they are printed
        "OMP_WAIT_POLICY": "PASSIVE",  # spinning OpenMP threads starve the other workers on shared cores
        "AIRFLOW_ML_NUM_WORKERS": str(spec.num_workers),
        **({"AIRFLOW_ML_MODEL_DIR": spec.model_dir} if spec.model_dir else {}),
        **({"AIRFLOW_ML_CHECKPOINT_DIR": spec.checkpoint_dir,
            TENSORBOARD_ENV: tensorboard_dir(spec.checkpoint_dir)} if spec.checkpoint_dir else {}),
        **spec.env,
    }
    if spec.framework is Framework.HOROVOD:
        if spec.env.get(quiet.SHOW, os.environ.get(quiet.SHOW)) == "1":  # the job's choice, else the submitter's
            env[quiet.SHOW] = "1"  # horovodrun's and the ranks' start-up notices shown (_run_horovod, runtime.quiet)
        else:
            # horovodrun's build probe (in an image without a build record: horovodrun_main) imports TensorFlow,
            # whose C++ start-up notices (absl, oneDNN, CPU instructions) opened every Horovod task's log; C++
            # INFO off here, and what ignores that level is dropped by _run_horovod
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        n = str(spec.num_workers)
        discovery = _discovery(job_dir, etcd) if spec.elastic else ""
        hosts = horovodrun_hosts(spec, ["-H", f"localhost:{n}"], discovery, slots=1)  # elastic: a host per worker
        if spec.command[0].startswith("-"):  # horovodrun keeps a "--" in the command, so refuse instead
            raise ValueError(f"command: the program {spec.command[0]!r} starts with '-', which horovodrun "
                             "would take for one of its own options")
        # --disable-cache: every host is local, so horovodrun's cache of remote checks (in ~/.horovod) has
        # nothing to save, and in a job's sandbox the home directory is read-only: creating it failed the job
        argv = [os.path.join(bin_dir, "python"), str(HOROVODRUN_MAIN), "-np", n, *hosts, "--gloo",
                "--network-interface", "lo", "--disable-cache", *rank_shim(), *spec.command]
    elif spec.framework is Framework.PYTORCH:  # elastic: an agent per worker, at the rendezvous port the launcher picks
        env.update(torchrun.LINE_PREFIX_ENV | torchrun.FRESH_STORE_ENV, GLOO_SOCKET_IFNAME="lo")
        options = torchrun.torchrun_args(spec, rdzv_id=job_dir.name) if spec.elastic else torchrun.one_machine_args(spec)
        argv = [os.path.join(bin_dir, "python"), str(TORCHRUN_MAIN), *options]  # torchrun, its tails 10x faster
    elif spec.framework is Framework.XGBOOST:  # each worker waits for the job's tracker, then runs its command
        argv = xgboost.local_gate(sys.executable, spec.command)
        return {"framework": spec.framework.value, "argv": argv, "env": env, "cwd": spec.working_dir or str(job_dir),
                "tracker_python": os.path.join(bin_dir, "python")}
    elif spec.roles is not None:  # a process group per role (local_roles)
        return {"framework": spec.framework.value, "argv": list(spec.command), "env": env,
                "cwd": spec.working_dir or str(job_dir), "roles": local_roles.role_plan(spec)}
    elif spec.shards is not None and not spec.shards.in_process:  # the command runs once per shard
        argv = [sys.executable, "-I", "-S", str(SHARD_RUNNER), "--", *spec.command]
        env[shards.COUNT_ENV] = str(spec.shards.count)
    else:
        argv = list(spec.command)
        if spec.shards is not None:
            env[shards.COUNT_ENV] = str(spec.shards.count)
    return {"framework": spec.framework.value, "argv": argv, "env": env,
            "cwd": spec.working_dir or str(job_dir)}


def _discovery(job_dir: Path, etcd: str | None) -> str:
    """An elastic job's discovery command: it lists the job's slots in etcd. (horovodrun gets no ``--log-level``:
    it hands it to the workers too, whose C++ log lines then tear the trainer's JSON lines apart; the trainer
    reports each membership change itself.)"""
    if not etcd:
        raise ValueError("an elastic job needs etcd for its worker slots: set AIRFLOW_ML_ETCD or the backend's etcd")
    return shlex.join([sys.executable, "-m", "airflow_ml_provider.runtime.local_discovery", "--etcd", etcd,
                       "--job", job_dir.name])


def main(job_dir: Path) -> int:
    payload = sys.stdin.buffer.read()  # EOF: the submitter finished, or died
    try:
        secrets = _submitted_secrets(payload)
    except _Interrupted:
        _record_never_launched(job_dir)
        return 0
    writer, timing = None, {}
    reserve = _reserve(job_dir)
    try:
        writer = _LineWriter(job_dir / "output.log")
        # A cancel while the submitter was still starting this launcher found no process of the job to stop
        # (a process is found by its environment, which the launcher has only once it runs): it left only
        # the marker, and nothing starts.
        if (asked := _cancelled(job_dir)) is not None:
            status = JobStatus(JobState.CANCELLED, asked)
        else:
            status = _launch(job_dir, secrets, writer, timing)
    except BaseException as exc:  # noqa: BLE001 - whatever stops the launcher is the job's failure
        with contextlib.suppress(OSError):  # a full disk
            import traceback  # (here: the launcher's start path pays for no failure's modules)

            traceback.print_exc()  # into launcher.log, for whoever debugs the launcher
        status = JobStatus(JobState.FAILED, f"the launcher could not run the job: {_describe(exc)}")
    if status.state is not JobState.SUCCEEDED and (asked := _cancelled(job_dir)) is not None:
        status = JobStatus(JobState.CANCELLED, asked, status.exit_codes)  # its own task stopped it, not a preemption
    if writer is not None:
        writer.write("launcher", f"job ended: {status.state.value} {status.message}".rstrip())
        writer.close()
    _write_status(job_dir, {**status.to_dict(), **timing}, reserve)
    return 0


def _record_never_launched(job_dir: Path) -> None:
    """The submitter died mid-submit, so nothing runs; its job's status says so. Unless, while this
    launcher was starting, a new submission archived that job and made a new one in ``job_dir`` (a task
    retry, milliseconds later): then this status would end the new job, so nothing is written (the archive
    reads as never launched by itself: no launcher.json). The submission lock orders the two."""
    fd = open_private(submission_lock(job_dir), append=True)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if (read_json(job_dir / "job.json") or {}).get("uid") == os.environ.get(JOB_UID_ENV):
            write_json(job_dir / "status.json", NEVER_LAUNCHED_STATUS.to_dict())
    finally:
        os.close(fd)  # releases the lock


def rank_shim() -> list[str]:
    """The argv prefix that runs a Horovod rank under ``local_output``'s shim, with this interpreter in
    isolated mode (no site-packages: it needs the standard library only, whatever the rank's environment)."""
    return [sys.executable, "-I", "-S", str(Path(__file__).with_name("output.py"))]


def _cancelled(job_dir: Path) -> str | None:
    """The reason ``LocalBackend.cancel`` left, if it did (an empty marker: a cancel on a full disk)."""
    try:
        return (job_dir / "cancelled").read_text().strip() or "cancelled"
    except FileNotFoundError:
        return None
    except OSError:
        return "cancelled"


def _reserve(job_dir: Path) -> Path | None:
    """Space held back for ``status.json``: on a full disk the launcher frees it to record the end."""
    path = job_dir / ".status-reserve"
    try:
        fd = open_private(path)
        try:
            os.write(fd, b"\0" * _RESERVE_BYTES)
        finally:
            os.close(fd)
        return path
    except OSError:
        return None


def _write_status(job_dir: Path, status: dict, reserve: Path | None) -> None:
    try:
        write_json(job_dir / "status.json", status)
    except OSError:
        if reserve is None:
            raise
        reserve.unlink(missing_ok=True)  # (nothing printed: launcher.log is on the same full disk)
        reserve = None
        write_json(job_dir / "status.json", status)
    if reserve is not None:
        reserve.unlink(missing_ok=True)


def _submitted_secrets(payload: bytes) -> dict[str, str]:
    try:
        document = json.loads(payload)
        secrets = document["secrets"]
    except (ValueError, KeyError, TypeError):
        raise _Interrupted from None
    return secrets


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (ValueError, OSError)) and str(exc):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _launch(job_dir: Path, secrets: dict[str, str], writer: _LineWriter, timing: dict[str, float]) -> JobStatus:
    """Run the job; ``timing`` gets when the launcher began starting it, when its workers ran and when they
    ended (epoch seconds), which tells the launcher's and the sandbox's cost apart from the job's."""
    record = read_json(job_dir / "job.json")
    plan, spec = record["plan"], record["spec"]
    # A sandboxed job's user has no home of its own on the host: its private /tmp is (the job's env may say else)
    home = {"HOME": local_sandbox.PRIVATE_TMP} if plan.get("sandbox") else {}
    env = allowed_env(os.environ) | home | plan["env"] | {JOB_UID_ENV: record["uid"]} | secrets
    _check_nul(plan["argv"], env)
    sandbox = None
    if plan.get("sandbox"):  # every worker starts inside the job's sandbox, whose directories the submitter made
        sandbox = JobSandbox(job_dir.parent.parent, record, writer.write)
        plan = {**plan, "cwd": plan["cwd"] if spec.get("working_dir") else local_sandbox.PRIVATE_TMP}
    else:
        _make_directories(spec)
    start = sandbox.start if sandbox is not None else _popen_all
    watchdog = _Watchdog(job_dir, record, writer)
    sampler = ResourceSampler(lambda: _launcher_and_job(record["uid"]), writer.write)
    runner = {"horovod": _run_horovod, "pytorch": _run_torchrun}.get(plan["framework"], _run_ranks)
    if spec.get("shards"):
        # here, not at the top: its pydantic import would add ~60 ms to every job's start
        from airflow_ml_provider.jobs.backends.local.sharded import run_shards

        runner = functools.partial(run_shards, on_started=_forward_sigterm)
    if plan.get("roles"):
        from airflow_ml_provider.jobs.backends.local import roles as local_roles

        runner = functools.partial(local_roles.run_roles, on_started=_forward_sigterm)
    def started(*args, **kwargs) -> list:
        workers = start(*args, **kwargs)
        timing.setdefault("workers_started_at", time.time())  # the first workers run: their sandbox has started
        return workers

    try:
        timing["launched_at"] = time.time()  # the launcher starts the workers (their sandbox first)
        status = runner(spec, plan, env, writer, started)
        timing["workers_ended_at"] = time.time()
    finally:
        sampler.finish()
        watchdog.finish()
        exceeded = sandbox.exceeded() if sandbox is not None else None
        if sandbox is not None:
            sandbox.close()
    if exceeded is not None and status.state is not JobState.SUCCEEDED:
        return JobStatus(JobState.FAILED, exceeded, status.exit_codes)
    if watchdog.reason is not None and status.state is not JobState.SUCCEEDED:
        return JobStatus(watchdog.reason.state, watchdog.reason.message, status.exit_codes)
    return status


def _launcher_and_job(uid: str) -> list:
    """This launcher and every process of its job (a launcher forked by the warm launcher has the server's
    environment in /proc, not the job's marker)."""
    import psutil

    return [psutil.Process(), *job_processes(uid, exclude=os.getpid())]


def _make_directories(spec: dict) -> None:
    """An unsandboxed job's model and checkpoint directories (a sandboxed job's are its submitter's)."""
    for field in ("model_dir", "checkpoint_dir"):
        if (directory := spec.get(field)) and "://" not in directory:  # object storage has no directories
            try:
                Path(directory).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise OSError(f"{field}: cannot create {directory!r}: {exc.strerror or exc}") from None


def _check_nul(argv: list[str], env: dict[str, str]) -> None:
    """Name the offending element: the OS would only say "embedded null byte"."""
    for index, arg in enumerate(argv):
        if "\0" in arg:
            raise ValueError(f"command: argument {index} ({arg.split(chr(0))[0]!r}...) contains a NUL byte, "
                             "which no program argument can hold")
    for name, value in env.items():
        if "\0" in name or "\0" in value:
            raise ValueError(f"env: variable {name.split(chr(0))[0]!r} contains a NUL byte, which no "
                             "environment variable can hold")


class _Watchdog:
    """Stops the job when its deadline passes, its lease expires or its log cannot be written (a full
    disk); ``reason`` says which. It never writes a file before stopping the job, so it works on a full
    disk too."""

    def __init__(self, job_dir: Path, record: dict, writer: _LineWriter):
        self.timeout_s = record["spec"].get("timeout_s")
        self.deadline = record["submitted_at"] + self.timeout_s if self.timeout_s else None
        self.orphan_grace_s = record.get("orphan_grace_s")
        self.submitted_at = record["submitted_at"]
        self.heartbeat = job_dir / "heartbeat"
        self.uid = record["uid"]
        self.cancel_grace_s = record.get("cancel_grace_s", 10.0)
        self.writer = writer
        self.reason: JobStatus | None = None
        self._done = False
        self._wake = threading.Event()
        writer.on_error = self._wake.set
        self._thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)
        self._thread.start()

    def finish(self) -> None:
        self._done = True
        self._wake.set()
        self._thread.join()

    def _watch(self) -> None:
        period = min(1.0, self.orphan_grace_s / 4) if self.orphan_grace_s else 1.0
        while True:
            now = time.time()
            wait = period if self.deadline is None else max(0.0, min(period, self.deadline - now))
            self._wake.wait(wait)
            if self._done:
                return
            self.reason = self._check(time.time())
            if self.reason is not None:
                self.writer.write("launcher", f"stopping the job: {self.reason.message}")
                _STOPPING.set()
                terminate(lambda: job_processes(self.uid, exclude=os.getpid()), self.cancel_grace_s)
                return

    def _check(self, now: float) -> JobStatus | None:
        if (error := self.writer.error) is not None:
            return JobStatus(JobState.FAILED, f"could not write the job's log {self.writer.path}: "
                                              f"{error.strerror or error}")
        if self.deadline is not None and now >= self.deadline:
            return JobStatus(JobState.FAILED, f"deadline of {self.timeout_s} s exceeded (timeout_s)")
        if self.orphan_grace_s is not None:
            try:
                renewed = self.heartbeat.stat().st_mtime
            except OSError:
                renewed = self.submitted_at
            if now - renewed > self.orphan_grace_s:
                return JobStatus(JobState.CANCELLED, f"no follower for {self.orphan_grace_s:g} s: the owning task "
                                                     "is gone (nothing called heartbeat on the job; orphan_grace_s)")
        return None


class _LineWriter:
    """Serializes lines from many reader threads into one file, ``[source] text`` each. A failed write
    (a full disk, an I/O error) never reaches a reader thread, which would die and leave its worker
    blocked on a full pipe: the first error is kept in ``error`` and ``on_error`` is called, later lines
    are dropped, and the readers go on draining the workers' pipes."""

    def __init__(self, path: Path):
        self.path = path
        self.error: OSError | None = None
        self.on_error: Callable[[], None] | None = None
        self._fd = open_private(path, append=True)
        self._lock = threading.Lock()

    def write(self, source: str, text: str) -> None:
        data = f"[{source}] {text}\n".encode(errors="replace")
        with self._lock:
            if self.error is not None or self._fd < 0:
                return
            try:
                while data:
                    data = data[os.write(self._fd, data):]
            except OSError as exc:
                self.error = exc
                if self.on_error is not None:
                    self.on_error()

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def _popen(argv: list[str], env: dict[str, str], cwd: str, stdin: int = subprocess.DEVNULL) -> subprocess.Popen:
    """A worker with its output on a binary pipe: ``local_output.lines`` decodes and bounds it."""
    return subprocess.Popen(argv, env=env, cwd=cwd, stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)


def _popen_all(workers: list[tuple[list[str], dict[str, str], str]],
               stdins: list[int] | None = None) -> list[subprocess.Popen]:
    """Unsandboxed workers, each a process of its own (``stdins``: each one's stdin, a sharded job's channel);
    if one cannot start, none runs (OSError)."""
    procs = []
    try:
        for index, (argv, env, cwd) in enumerate(workers):
            procs.append(_popen(argv, env, cwd, stdins[index] if stdins else subprocess.DEVNULL))
    except OSError:
        for proc in procs:
            proc.kill()
        raise
    return procs


def _run_horovod(spec: dict, plan: dict, env: dict[str, str], writer: _LineWriter, start: Start) -> JobStatus:
    try:
        [proc] = start([(plan["argv"], env, plan["cwd"])])
    except OSError as exc:
        return _not_started(plan, exc, writer)
    _forward_sigterm(env[JOB_UID_ENV])
    codes: dict[int, int] = {}
    failures: list[tuple[int, int]] = []
    held: list[str] = []  # horovodrun's traceback: written at its end unless the launcher stopped the job
    show_startup = env.get(quiet.SHOW) == "1"
    for line in lines(proc.stdout):
        for source, text, exit_code in horovod_output(line):
            if source == "horovodrun" and not show_startup and quiet.NOISE.match(text):
                continue  # TensorFlow's start-up notices, printed whatever TF_CPP_MIN_LOG_LEVEL says (oneDNN's)
            if source == "horovodrun" and (held or text == _TRACEBACK):
                held.append(text)
            else:
                writer.write(source, text)
            if exit_code is not None:
                codes[exit_code[0]] = exit_code[1]
                failures.append(exit_code)
    code = proc.wait()
    if not _STOPPING.is_set():  # a stop (a cancel, the deadline) is the launcher's one line, not this traceback
        for text in held:
            writer.write("horovodrun", text)
    elastic = spec.get("min_workers") is not None or spec.get("max_workers") is not None
    if code == 0 and not elastic:
        codes = dict.fromkeys(range(spec["num_workers"]), 0)
    if elastic and code == 0:  # horovodrun finished the job with the workers it had left
        lost = ", ".join(f"rank {rank} (exit {c})" for rank, c in failures)
        return JobStatus(JobState.SUCCEEDED, f"elastic: lost {lost}; finished without them" if lost else "", codes)
    return _verdict(codes, failures, code, "horovodrun")


def horovod_output(line: str) -> list[tuple[str, str, tuple[int, int] | None]]:
    """One line of horovodrun's output as (source, text, (rank, exit code) if it reports a rank's end).
    A rank's lines are ``[rank]<stdout|stderr>:text``; the rest is horovodrun's own, labelled ``horovodrun``
    (never ``launcher``: a rank can reach horovodrun's output, never the launcher's own lines)."""
    parts = []
    while match := _HOROVOD_EXIT.match(line):  # horovodrun's own report of a rank's end
        parts.append(("horovodrun", match.group(0), (int(match["rank"]), int(match["code"]))))
        line = line[match.end():]
    if match := _HOROVOD_LINE.match(line):
        parts.append((f"rank {match['rank']}", match["text"], None))
    elif line or not parts:
        parts.append(("horovodrun", line, None))
    return parts


def _run_ranks(spec: dict, plan: dict, env: dict[str, str], writer: _LineWriter, start: Start) -> JobStatus:
    """One process per rank; each is told every rank's address (LightGBM's ``machines``), or for an XGBoost
    job the tracker's, which runs beside the ranks as a process of the job (``jobs.xgboost`` says why)."""
    n = spec["num_workers"]
    helpers: list[tuple[list[str], dict[str, str], str]] = []
    if plan["framework"] == "xgboost":
        # (here: no other job's start pays for its tracker's modules)
        from airflow_ml_provider.jobs import xgboost

        [port] = free_ports(1)  # (a sandboxed job's network is its own: any port is free there)
        ranks = [env | {"AIRFLOW_ML_RANK": str(rank)} | xgboost.worker_env("127.0.0.1", port, n, rank)
                 for rank in range(n)]
        helpers.append((xgboost.tracker_argv(plan["tracker_python"], n, port), env, plan["cwd"]))
    else:
        ports = free_ports(n)
        machines = ",".join(f"127.0.0.1:{port}" for port in ports)
        ranks = [env | {"AIRFLOW_ML_RANK": str(rank), "AIRFLOW_ML_LOCAL_PORT": str(port),
                        "AIRFLOW_ML_MACHINES": machines} for rank, port in enumerate(ports)]
    try:
        started = start([*helpers, *((plan["argv"], rank_env, plan["cwd"]) for rank_env in ranks)])
    except OSError as exc:
        return _not_started(plan, exc, writer)
    _forward_sigterm(env[JOB_UID_ENV])
    tracker, procs = (started[0] if helpers else None), started[len(helpers):]
    readers = [threading.Thread(target=_pump, args=(p.stdout, f"rank {r}", writer)) for r, p in enumerate(procs)]
    if tracker is not None:
        readers.append(threading.Thread(target=_pump, args=(tracker.stdout, "xgboost-tracker", writer)))
    for reader in readers:
        reader.start()
    ending = _ends_of([*procs, *([tracker] if tracker is not None else [])])
    codes: dict[int, int] = {}
    failures: list[tuple[int, int]] = []
    tracker_code = None  # the tracker's exit, when it failed before any rank did
    while len(codes) < len(procs):
        ending.wait()
        ending.clear()  # (before the look: an end after it wakes the next wait)
        ended = []
        for rank, proc in enumerate(procs):
            if rank not in codes and (code := proc.poll()) is not None:
                codes[rank] = code
                if code != 0:
                    ended.append((rank, code))
        # of ranks seen ending together, one killed from outside first: the others failed for its loss
        failures += sorted(ended, key=lambda failure: failure[1] not in _KILL_SIGNALS)
        if tracker is not None and tracker_code is None and not failures and tracker.poll() not in (None, 0):
            tracker_code = tracker.poll()
        if failures or tracker_code is not None:  # the others would wait forever on the missing peer
            for rank, proc in enumerate(procs):
                if rank not in codes and proc.poll() is None:
                    proc.terminate()
    if tracker is not None:
        _stop_helper(tracker, grace_s=0.0 if failures else 10.0)
    for reader in readers:
        reader.join()
    if tracker_code is not None:
        state = JobState.PREEMPTED if tracker_code in _KILL_SIGNALS else JobState.FAILED  # killed from outside
        return JobStatus(state, f"the xgboost tracker exited with code {tracker_code}", codes)
    return _verdict(codes, failures, max(codes.values(), key=abs), "the workers")


def _ends_of(procs: list) -> threading.Event:
    """An event set each time one of ``procs`` ends (a thread waiting on each): the launcher learns of a
    worker's end at once, not at its next look."""
    event = threading.Event()

    def wait(proc) -> None:
        proc.wait()
        event.set()

    for proc in procs:
        threading.Thread(target=wait, args=(proc,), daemon=True).start()
    event.set()  # the first look is at once
    return event


def _stop_helper(proc, grace_s: float = 10.0) -> None:
    """A helper of the job (XGBoost's tracker) once its ranks ended: it ends by itself when they all shut down
    their communicator; otherwise (a rank failed) it is stopped."""
    deadline = time.monotonic() + grace_s
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if proc.poll() is None:
        proc.terminate()
        proc.wait()


def _run_torchrun(spec: dict, plan: dict, env: dict[str, str], writer: _LineWriter, start: Start) -> JobStatus:
    """A fixed-size job: one torchrun agent running every worker's ranks, as torchrun runs one machine; it ends
    as its agent does. An elastic job: one agent per worker (a lost worker is a lost node), meeting at one
    loopback port (``PET_RDZV_ENDPOINT``), each on a loopback address of its own (``PET_LOCAL_ADDR``), as
    each would be on a host of its own; it succeeds when an agent finishes the training, the group having
    re-formed."""
    elastic = spec.get("min_workers") is not None or spec.get("max_workers") is not None
    endpoint = f"127.0.0.1:{free_ports(1)[0]}"
    agents = [env | {"PET_RDZV_ENDPOINT": endpoint, "PET_LOCAL_ADDR": _loopback(worker)}
              for worker in range(spec["num_workers"])] if elastic else [env]  # fixed size: one agent runs all
    try:
        procs = start([(plan["argv"], agent_env, plan["cwd"]) for agent_env in agents])
    except OSError as exc:
        return _not_started(plan, exc, writer)
    _forward_sigterm(env[JOB_UID_ENV])
    summaries = [torchrun.FailureSummary() for _ in procs]
    readers = [threading.Thread(target=_pump_torchrun, args=(p.stdout, writer, summaries[i]))
               for i, p in enumerate(procs)]
    for reader in readers:
        reader.start()
    codes = {worker: proc.wait() for worker, proc in enumerate(procs)}
    for reader in readers:
        reader.join()
    failures = [failure for summary in summaries for failure in summary.failures]
    if elastic and 0 in codes.values():
        lost = ", ".join(f"rank {rank} (exit {code})" for rank, code in failures)
        return JobStatus(JobState.SUCCEEDED, f"elastic: lost {lost}; the group re-formed" if lost else "", codes)
    failures += [(worker, code) for worker, code in codes.items() if code in _KILL_SIGNALS]
    failures.sort(key=lambda failure: failure[1] not in _KILL_SIGNALS)  # a rank killed from outside: preempted
    return _verdict(codes, failures, max(codes.values(), key=abs), "the torchrun agents")


def _loopback(worker: int) -> str:
    """Worker ``worker``'s address in 127.0.0.0/8 (all of it is the loopback interface): 127.0.0.1, .2, ..."""
    n = worker + 1
    return f"127.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"


def _pump_torchrun(stream: IO[bytes], writer: _LineWriter, summary: torchrun.FailureSummary) -> None:
    for line in lines(stream):
        rank, text = torchrun.output(line)
        if rank is None:
            summary.feed(text)
        writer.write("torchrun" if rank is None else f"rank {rank}", text)


def _not_started(plan: dict, exc: OSError, writer: _LineWriter) -> JobStatus:
    """The program does not exist or cannot be executed."""
    message = f"could not start {plan['argv'][0]!r}: {exc.strerror or exc}"
    writer.write("launcher", message)
    return JobStatus(JobState.FAILED, message)


def _verdict(codes: dict[int, int], failures: list[tuple[int, int]], overall: int, who: str) -> JobStatus:
    if overall == 0 and not failures:
        return JobStatus(JobState.SUCCEEDED, exit_codes=codes)
    if not failures:
        return JobStatus(JobState.FAILED, f"{who} exited with {overall}", exit_codes=codes)
    rank, code = failures[0]
    if code in _KILL_SIGNALS:
        return JobStatus(JobState.PREEMPTED, f"rank {rank} was killed by a signal (exit {code})", codes)
    return JobStatus(JobState.FAILED, f"rank {rank} exited with code {code}", codes)


def _pump(stream: IO[bytes], source: str, writer: _LineWriter) -> None:
    for line in lines(stream):
        writer.write(source, line)


def _forward_sigterm(uid: str) -> None:
    """A SIGTERM to the launcher (a cancel, a shutdown) goes on to every process of the job but the
    sandboxes' own processes, which would end their sandbox at once: the workers get their grace."""
    def handler(signum, _frame):
        _STOPPING.set()
        for proc in job_processes(uid, exclude=os.getpid()):
            if not is_sandbox_process(proc):
                signal_process(proc, signum)

    signal.signal(signal.SIGTERM, handler)


if __name__ == "__main__":
    code = main(Path(sys.argv[1]))
    # Out at once, without the interpreter's teardown (~13 ms): the job's status is written, every worker
    # reaped and every thread of the launcher finished, and the follower is woken by this exit (a pidfd).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
