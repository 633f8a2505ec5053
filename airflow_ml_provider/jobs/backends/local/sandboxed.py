"""The launcher's side of a job's sandbox: one bubblewrap sandbox for all the job's workers, started within
the job's bounds and as its user, its egress relayed, its workers' ends reported.

Bubblewrap reports its sandbox's process (``--info-fd``), which becomes the spawner itself (``--as-pid-1``: the
spawner is the sandbox's init). While it starts, the launcher puts it in the job's cgroups and gives it the
process floor (``bounds.enter``); only then does it send the spawner its plan, and the spawner starts no worker
before its plan: nothing of the job runs outside its bounds, and the bounds cost the start nothing (bubblewrap
used to hold the process, ``--block-fd``, until they were entered: ~5 ms of every job's start, a memory cgroup's
entry).

``JobSandbox.start`` hands the workers to the sandbox's ``spawner`` and returns one ``SandboxedWorker`` per
worker, which the launcher's runners use as they use a ``Popen``: ``stdout`` (the worker's output pipe),
``poll``, ``wait``, ``terminate``, ``kill``. A worker whose end the spawner never reported (the sandbox was
killed: a stop, the OOM killer) ended by SIGKILL.
"""

from __future__ import annotations

import json
import marshal
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from airflow_ml_provider.jobs.backends.local import bounds as local_bounds
from airflow_ml_provider.jobs.backends.local import egress as local_egress
from airflow_ml_provider.jobs.backends.local import sandbox as local_sandbox
from airflow_ml_provider.jobs.backends.local import seccomp as local_seccomp
from airflow_ml_provider.jobs.backends.local.common import JOB_UID_ENV, allowed_env, write_private

SPAWNER = str(Path(__file__).with_name("spawner.py"))
STDERR_GRACE_S = 5.0  # how long a sandbox that did not start may take to finish saying why


class SandboxedWorker:
    """One worker inside the sandbox, shaped like the part of ``Popen`` the runners use."""

    def __init__(self, sandbox: JobSandbox, index: int, stdout):
        self.sandbox, self.index, self.stdout = sandbox, index, stdout

    def poll(self) -> int | None:
        return self.sandbox.ended.codes.get(self.index)

    def wait(self) -> int:
        self.sandbox.ended.wait_for(self.index)
        return self.sandbox.ended.codes[self.index]

    def send_signal(self, signum: int) -> None:
        self.sandbox.signal(self.index, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Ends:
    """The workers' exit codes as the spawner reports them, and a wait for each."""

    def __init__(self) -> None:
        self.codes: dict[int, int] = {}
        self._changed = threading.Condition()

    def wait_for(self, index: int) -> None:
        with self._changed:
            self._changed.wait_for(lambda: index in self.codes)

    def record(self, index: int, code: int) -> None:
        with self._changed:
            self.codes.setdefault(index, code)
            self._changed.notify_all()


class JobSandbox:
    """Everything one job's sandbox holds outside it: its cgroups, egress relays and the bwrap process.

    Args:
        root: the local backend's root (the relays' sockets live in ``<root>/egress/<attempt>``).
        record: the job's ``job.json`` (its ``uid`` and ``plan["sandbox"]``).
        log: where the sandbox's own messages go (``(source, text)``), e.g. the job's ``[launcher]`` lines.
    """

    def __init__(self, root: Path, record: dict, log):
        self.config = record["plan"]["sandbox"]
        self.attempt = f"{record['name']}-{record['uid'][:8]}"
        self.log = log
        self.ended = _Ends()
        self._proc: subprocess.Popen | None = None
        self._control_lock = threading.Lock()
        self.bounds = local_bounds.create(self.attempt, **self.config["bounds"])
        if self.bounds.unbounded:
            log("launcher", self.bounds.unbounded)
        plan = local_egress.listen_plan(self.config.get("egress", []))
        self._egress_dir = root / "egress" / self.attempt
        self.relays = local_egress.Relays(plan, self._egress_dir)
        self._hosts = self._egress_dir / "hosts"
        write_private(self._hosts, local_egress.hosts_file(plan))
        os.chmod(self._hosts, 0o644)
        self._low_ports = any(entry["listen"][1] < 1024 for entry in plan)

    def start(self, workers: list[tuple[list[str], dict[str, str], str]],
              stdins: list[int] | None = None) -> list[SandboxedWorker]:
        """Start ``(argv, env, cwd)`` workers in one sandbox (``stdins``: each one's stdin, a descriptor of the
        launcher's, e.g. a sharded job's channel; else none); OSError (as Popen raises it) if one cannot start."""
        pipes = [os.pipe() for _ in workers]
        seccomp_fd = local_seccomp.program_fd()
        info, info_end = os.pipe()
        inherited = [write for _, write in pipes] + ([seccomp_fd] if seccomp_fd is not None else []) + [info_end]
        inheritable = list(stdins or [])  # (the caller's: passed on, not closed here)
        bwrap, *options = local_sandbox.argv(self.config, seccomp_fd, str(self._egress_dir), str(self._hosts),
                                             self._low_ports)
        command = [bwrap, "--info-fd", str(info_end), *options,
                   sys.executable, "-I", "-S", SPAWNER]
        env = allowed_env(os.environ) | {JOB_UID_ENV: workers[0][1][JOB_UID_ENV]}
        try:
            self._proc = subprocess.Popen(command, env=env, cwd="/", stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, pass_fds=inherited + inheritable)
        except OSError:
            os.close(info)
            raise
        finally:
            for fd in inherited:
                os.close(fd)
        self._stderr = threading.Thread(target=self._relay_stderr, daemon=True)
        self._stderr.start()
        try:
            self._bound(info)
        except OSError:
            for read, _ in pipes:
                os.close(read)
            raise
        plan = {"workers": [{"argv": argv, "env": worker_env, "cwd": cwd, "fd": write,
                             **({"stdin": stdins[index]} if stdins else {})}
                            for index, ((argv, worker_env, cwd), (_, write)) in enumerate(zip(workers, pipes))],
                "relays": self.relays.sockets, "user": self.config.get("uid")}
        try:
            self._proc.stdin.write(marshal.dumps(plan))
            self._proc.stdin.flush()
            first = json.loads(self._proc.stdout.readline() or b'{"failed": -1}')
        except (OSError, ValueError):
            first = {"failed": -1}
        if "started" not in first:
            for read, _ in pipes:
                os.close(read)
            self._stopped_at_start()
            if isinstance(code := first.get("errno"), int) and code > 0:
                raise OSError(code, os.strerror(code))
            raise OSError(f"the job's sandbox could not start (exit {self._proc.returncode}; its reason is in the "
                          "job's [launcher] lines)")
        threading.Thread(target=self._read_ends, args=(len(workers),), daemon=True).start()
        return [SandboxedWorker(self, index, os.fdopen(read, "rb"))
                for index, (read, _) in enumerate(pipes)]

    def _bound(self, info: int) -> None:
        """The sandbox's process (the spawner, starting) into the job's bounds; OSError (the sandbox stopped) if
        bubblewrap did not start it or it cannot be bounded."""
        try:
            with os.fdopen(info, "rb") as reports:  # bubblewrap closes it once it has said, or as it dies
                child = json.loads(reports.read() or b"{}").get("child-pid")
            if not isinstance(child, int):
                raise OSError("bubblewrap did not start the job's sandbox (its reason is in the job's [launcher] "
                              "lines)")
            try:
                local_bounds.enter(self.bounds, child)
            except OSError as exc:
                raise OSError(f"the job's sandbox could not be put in its bounds: {exc}") from None
        except (OSError, ValueError) as exc:
            self._proc.kill()
            self._stopped_at_start()
            raise OSError(str(exc)) from None

    def _stopped_at_start(self) -> None:
        """The sandbox that did not start, reaped, and what it said relayed before the job's end is written (the
        error points there)."""
        self._proc.wait()
        self._stderr.join(timeout=STDERR_GRACE_S)

    def signal(self, index: int, signum: int) -> None:
        """Send ``signum`` to worker ``index`` (nothing once the sandbox is gone)."""
        with self._control_lock:
            try:
                self._proc.stdin.write(marshal.dumps((index, int(signum))))  # (marshal takes no Signals enum)
                self._proc.stdin.flush()
            except (OSError, ValueError):
                pass

    def exceeded(self) -> str | None:
        """The bound the job hit, in words (see ``local_bounds.exceeded``)."""
        return local_bounds.exceeded(self.bounds)

    def close(self) -> None:
        """Once the job ended: the sandbox reaped, the relays stopped, the cgroups and sockets removed."""
        if self._proc is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
            self._proc.wait()
        self.relays.close()
        local_bounds.remove(self.bounds)
        for path in (self._egress_dir.glob("*") if self._egress_dir.is_dir() else []):
            path.unlink(missing_ok=True)
        if self._egress_dir.is_dir():
            self._egress_dir.rmdir()

    def _read_ends(self, count: int) -> None:
        for line in self._proc.stdout:
            try:
                message = json.loads(line)
                self.ended.record(int(message["worker"]), int(message["code"]))
            except (ValueError, KeyError, TypeError):
                continue
        for index in range(count):  # the sandbox ended without saying: it was killed, and with it its workers
            self.ended.record(index, -signal.SIGKILL)

    def _relay_stderr(self) -> None:
        for line in self._proc.stderr:
            self.log("launcher", "sandbox: " + line.decode(errors="replace").rstrip())
