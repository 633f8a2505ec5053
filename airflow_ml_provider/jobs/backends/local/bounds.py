"""A local job's resource bounds: its memory and its number of processes, in control groups of its own.

The launcher makes one cgroup per controller for the job, a child of the launcher's own (cgroup v1: under
``/sys/fs/cgroup/memory`` and ``/sys/fs/cgroup/pids``; v2: one cgroup under the unified hierarchy), sets
``memory`` and ``pids`` limits there, and puts the job's sandbox in them (``enter``: its first process, the
spawner, before it starts any worker), so every process of the job, however deep, is counted. The sandbox's
``/tmp`` and ``/dev/shm`` are tmpfs,
whose pages are charged to the job's memory too. After the job ends, ``exceeded`` reads the cgroups'
counters: an OOM kill or a refused fork is the job's failure, named, never a preemption.

Where no cgroup can be made (no delegation to this user, a read-only hierarchy), the process count still has
a floor, ``RLIMIT_NPROC``, which the kernel counts per user and user namespace (the job's own), and memory is
unbounded: ``Bounds.unbounded`` says why, for the job's log.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
_CONTROLLERS = ("memory", "pids")


@dataclass
class Bounds:
    """The cgroups made for one job (``paths``: controller -> directory) and the limits set in them."""

    memory_bytes: int
    max_processes: int
    paths: dict[str, str] = field(default_factory=dict)
    unbounded: str | None = None  # why no cgroup holds the job (then only RLIMIT_NPROC does)


    @property
    def v2(self) -> bool:
        """Whether the cgroups are cgroup v2's (one cgroup holds both controllers)."""
        return bool(self.paths) and self.paths.get("memory") == self.paths.get("pids")


def create(name: str, memory_bytes: int, max_processes: int) -> Bounds:
    """Make the job's cgroups with its limits (a leftover of the same name is reused: it is empty)."""
    bounds = Bounds(memory_bytes, max_processes)
    try:
        if (CGROUP_ROOT / "cgroup.controllers").exists():
            bounds.paths = _create_v2(name)
        else:
            bounds.paths = {controller: str(_create_v1(controller, name)) for controller in _CONTROLLERS}
        _write(bounds.paths["memory"], "memory.max" if bounds.v2 else "memory.limit_in_bytes", memory_bytes)
        if not bounds.v2:  # no swap beyond the limit either, where the kernel accounts swap
            _write_if_present(bounds.paths["memory"], "memory.memsw.limit_in_bytes", memory_bytes)
        _write(bounds.paths["pids"], "pids.max", max_processes)
    except (OSError, KeyError, ValueError) as exc:
        remove(bounds)
        bounds.paths, bounds.unbounded = {}, f"no cgroup for the job ({exc}): memory is not bounded, processes " \
                                               f"only by RLIMIT_NPROC={max_processes}"
    return bounds


def enter(bounds: Bounds, pid: int) -> None:
    """Put process ``pid`` (the job's sandbox, before it starts anything) in the job's cgroups, where it has
    them, and give it the process floor (RLIMIT_NPROC): what it forks inherits both. OSError if it cannot.
    Where the pids cgroup counts the same processes, the floor lies one above it: the cgroup refuses first and
    records it (``pids.events``), which names the bound in the job's failure."""
    for directory in sorted(set(bounds.paths.values())):
        _write(directory, "cgroup.procs", pid)
    floor = bounds.max_processes + (1 if "pids" in bounds.paths else 0)
    resource.prlimit(pid, resource.RLIMIT_NPROC, (floor, floor))


def exceeded(bounds: Bounds) -> str | None:
    """Which bound the ended job hit (its OOM kills, its refused forks), in words; None if neither."""
    paths = bounds.paths
    if "memory" in paths:
        events = _counters(paths["memory"], "memory.events" if bounds.v2 else "memory.oom_control")
        if events.get("oom_kill", 0) > 0:
            return (f"the job exceeded its memory limit of {bounds.memory_bytes // 2**20} MiB "
                    f"([ml_training] local_job_memory_mb): the kernel killed {events['oom_kill']} of its processes")
    if "pids" in paths and _counters(paths["pids"], "pids.events").get("max", 0) > 0:
        return (f"the job reached its limit of {bounds.max_processes} processes "
                "([ml_training] local_job_max_processes): the kernel refused it more")
    return None


def remove(bounds: Bounds) -> None:
    """Remove the job's (now empty) cgroups; what cannot be removed yet (a process still leaving) stays."""
    for directory in sorted(set(bounds.paths.values()), reverse=True):
        try:
            os.rmdir(directory)
        except OSError:
            pass


def _create_v1(controller: str, name: str) -> Path:
    own = _own_cgroup(controller)
    path = CGROUP_ROOT / controller / own.lstrip("/") / f"airflow-ml-{name}"
    path.mkdir(exist_ok=True)
    return path


def _create_v2(name: str) -> dict[str, str]:
    """A cgroup of its own beside the launcher: cgroup v2 lets no process sit in a cgroup whose controllers
    are handed to children, so the job's cgroup is a sibling under the launcher's parent."""
    parent = (CGROUP_ROOT / _own_cgroup("").lstrip("/")).parent
    (parent / "cgroup.subtree_control").write_text("+memory +pids")
    path = parent / f"airflow-ml-{name}"
    path.mkdir(exist_ok=True)
    return {"memory": str(path), "pids": str(path)}


def _own_cgroup(controller: str) -> str:
    """This process's cgroup path for ``controller`` ("" for the unified v2 hierarchy), from /proc/self/cgroup."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (controller == "" and controllers == "") or controller in controllers.split(","):
            return path
    raise KeyError(f"no {controller or 'unified'} cgroup in /proc/self/cgroup")


def _write(directory: str, name: str, value: int) -> None:
    Path(directory, name).write_text(str(value))


def _write_if_present(directory: str, name: str, value: int) -> None:
    if Path(directory, name).exists():
        _write(directory, name, value)


def _counters(directory: str, name: str) -> dict[str, int]:
    """A flat-keyed cgroup file (``key value`` lines) as numbers; empty if it cannot be read."""
    try:
        text = Path(directory, name).read_text()
    except OSError:
        return {}
    pairs = (line.split() for line in text.splitlines())
    return {pair[0]: int(pair[1]) for pair in pairs if len(pair) == 2 and pair[1].isdigit()}
