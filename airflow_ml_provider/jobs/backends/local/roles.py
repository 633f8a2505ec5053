"""The local backend's plan and runner of a job of several roles (``jobs.roles``): a process group per role.

Every process listens on a loopback port of its own (the job's processes share one sandbox and its network);
each is told the whole cluster and its own task in ``TF_CONFIG``, its role in ``AIRFLOW_ML_ROLE`` and
``AIRFLOW_ML_ROLE_INDEX``. Its lines are ``[<role> <index>] text`` in the job's log. What ends the job follows
the roles' policies (``jobs.roles``): the chief's end; a process of a ``fail`` role ending (FAILED, or
PREEMPTED when it was asked to stop by SIGTERM, as an eviction asks); or fewer than ``min_count`` left of a
``tolerate`` role. The processes still running then are stopped (SIGTERM, SIGKILL after a grace).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import IO

from airflow_ml_provider.jobs import roles as job_roles
from airflow_ml_provider.jobs.backends.local.common import JOB_UID_ENV
from airflow_ml_provider.jobs.backends.local.output import lines
from airflow_ml_provider.jobs.backends.local.ports import free_ports
from airflow_ml_provider.jobs.state import JobState, JobStatus

_EVICTED = {-signal.SIGTERM, 128 + signal.SIGTERM}  # asked to stop: what a kubelet's eviction sends first
_KILLED = _EVICTED | {-signal.SIGKILL, 128 + signal.SIGKILL}
_POLL_S = 0.05
STOP_GRACE_S = 10.0


def role_plan(spec) -> list[dict]:
    """Each role's processes as the launcher starts them (``spec``: a TrainingJobSpec with roles). The local
    backend runs every role in the job's image (its Python environment): ValueError naming a role's own."""
    plan = []
    for name, role in spec.roles.items():
        if role.image is not None and role.image != spec.image:
            raise ValueError(f"roles.{name}.image: the local backend runs every role in the job's image (a Python "
                             "environment); set image on the job, or use a Kubernetes backend")
        plan.append({"name": name, "count": role.count, "argv": list(role.command or spec.command),
                     "on_failure": job_roles.policy(name, role).value, "min_count": role.min_count or 1})
    return plan


class _Process:
    def __init__(self, role: dict, index: int, rank: int, proc):
        self.role, self.index, self.rank, self.proc = role, index, rank, proc
        self.label = f"{role['name']} {index}"
        self.code: int | None = None


def run_roles(spec: dict, plan: dict, env: dict[str, str], writer, start: Callable[..., list],
              on_started: Callable[[str], None]) -> JobStatus:
    """Run the job's process groups to the end the roles' policies say (see the module's docstring)."""
    tasks = [(role, index) for role in plan["roles"] for index in range(role["count"])]
    ports = free_ports(len(tasks))  # (a sandboxed job's network is its own: any port is free there)
    cluster: dict[str, list[str]] = {}
    for (role, _), port in zip(tasks, ports, strict=True):
        cluster.setdefault(role["name"], []).append(f"127.0.0.1:{port}")
    workers = [(role["argv"], env | job_roles.task_env(cluster, role["name"], index, rank), plan["cwd"])
               for rank, (role, index) in enumerate(tasks)]
    try:
        procs = start(workers)
    except OSError as exc:
        message = f"could not start {workers[0][0][0]!r}: {exc.strerror or exc}"
        writer.write("launcher", message)
        return JobStatus(JobState.FAILED, message)
    on_started(env[JOB_UID_ENV])
    group = [_Process(role, index, rank, proc) for rank, ((role, index), proc) in enumerate(zip(tasks, procs))]
    readers = [threading.Thread(target=_pump, args=(p.proc.stdout, p.label, writer)) for p in group]
    for reader in readers:
        reader.start()
    status = None
    lost: list[str] = []
    while status is None:
        time.sleep(_POLL_S)
        ended = []
        for process in (p for p in group if p.code is None):
            if (code := process.proc.poll()) is not None:
                process.code = code
                ended.append(process)
        status = _verdict(group, ended, lost, writer)
    _stop(group)
    for reader in readers:
        reader.join()
    codes = {p.rank: p.code for p in group if p.code is not None}
    return JobStatus(status.state, status.message, codes)


def _verdict(group: list[_Process], ended: list[_Process], lost: list[str], writer) -> JobStatus | None:
    """The job's end, if the processes ``ended`` in this round end it; None while it goes on. Of processes
    ending together, a server's end comes before the chief's (which failed for its loss)."""
    chief = next((p for p in ended if p.role["name"] == "chief"), None)
    if chief is not None and chief.code == 0:
        return JobStatus(JobState.SUCCEEDED, f"lost {', '.join(lost)}; the others finished their steps" if lost else "")
    for process in sorted(ended, key=lambda p: p.role["name"] == "chief"):
        what = f"{process.label} {_ending(process.code)}"
        if process.role["on_failure"] == job_roles.OnFailure.FAIL.value or process is chief:
            if process.code in _EVICTED:
                return JobStatus(JobState.PREEMPTED, f"{what}: evicted (on_failure: fail); resubmitted, the job "
                                                     "resumes from the chief's checkpoint")
            if process is chief and process.code in _KILLED:
                return JobStatus(JobState.PREEMPTED, what)
            return JobStatus(JobState.FAILED, f"{what} (roles.{process.role['name']}.on_failure: fail)")
        lost.append(f"{process.label} ({_ending(process.code)})")
        left = sum(1 for p in group if p.role is process.role and p.code is None)
        if left < process.role["min_count"]:
            return JobStatus(JobState.FAILED, f"{what}: {left} of role {process.role['name']!r} left, fewer than "
                                              f"its min_count ({process.role['min_count']})")
        writer.write("launcher", f"{what}; the job goes on with {left} {process.role['name']} "
                                 f"(roles.{process.role['name']}.on_failure: tolerate)")
    return None


def _ending(code: int) -> str:
    if code < 0 or code in _KILLED:
        number = -code if code < 0 else code - 128
        return f"was killed by signal {signal.Signals(number).name} (exit {code})"
    return f"exited with code {code}"


def _stop(group: list[_Process]) -> None:
    """SIGTERM to the processes still running (the servers, once the chief ended), SIGKILL after a grace."""
    running = [p for p in group if p.code is None]
    for process in running:
        process.proc.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    while any(p.proc.poll() is None for p in running) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    for process in running:
        if process.proc.poll() is None:
            process.proc.kill()
        process.code = process.proc.wait()


def _pump(stream: IO[bytes], source: str, writer) -> None:
    for line in lines(stream):
        writer.write(source, line)

