"""Each local job's sandbox, made with Debian's bubblewrap (``bwrap``): Linux namespaces, no daemon, no root.

One sandbox holds all the workers of a job (its ``spawner`` starts them). Inside it they run:
- **as an unprivileged user**: in a user namespace of their own, with no capabilities and no way to make
  another user namespace; where the launcher runs as root, also as a user of their own on the host (a uid
  per attempt, ``job_uid``), so that root-owned files and kernel settings are out of reach even where a
  mount rule slips;
- **in namespaces of their own**: PID (no other process is seen: not Airflow's, not another job's, so no
  ``/proc/<pid>/environ`` of theirs), IPC, UTS and network: the job's workers share a loopback of their
  own, where their rendezvous meets; they reach no host service and no other job, only the endpoints the
  deployment allows (``egress``, relayed by the launcher);
- **with read-only kernel interfaces**: ``/proc/sys`` and ``/sys`` read-only, a seccomp filter refusing
  mounts, namespaces, keyrings, modules, ``ptrace`` and the like (``local_seccomp``);
- **within bounds**: memory and process limits in cgroups of their own (``local_bounds``), a ``/tmp`` and
  ``/dev/shm`` of bounded size;
- **on a read-only filesystem** that shows nothing of what ``hidden`` names: ``$AIRFLOW_HOME`` (``airflow.cfg``,
  the metadata DB, logs), ``$AIRFLOW_CONFIG``, a SQLite metadata DB named by ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``,
  what the backend's ``hide`` adds (the hook: Airflow's configured SQLite DB, log folder and local secrets
  files), and the local backend's root (the job records, locks and owner key, every job's artifacts).
  Bound back into that view, writable: exactly the job's ``model_dir`` and ``checkpoint_dir`` and the
  ``output_dirs`` it declares (each a real path the submitter made and handed to the attempt's user:
  ``local_workdirs``; a mount point, which no job can replace with a link); read-only: ``<root>/data``
  (the runs' data shards), its declared ``inputs``, and the training environment and this package should
  they lie under a hidden path or a directory the job's user cannot enter.

When the sandbox's bwrap process dies, the kernel ends every process left in its PID namespace: nothing of
a job outlives it. The submitter computes the mounts (``mounts``, stored in the job's plan); the launcher
turns them into ``bwrap`` argv (``argv``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from airflow_ml_provider.jobs.backends.local import egress, workdirs
from airflow_ml_provider.jobs.backends.local.common import JOB_UID_ENV

PRIVATE_TMP = "/tmp"  # each job gets its own, empty: what lies under the machine's /tmp is shown only when bound
# --as-pid-1: the sandbox's command (the spawner) is its init, reaping what is left to it; no reaper of bubblewrap's
# between, so the process bubblewrap reports is the spawner, bounded while it starts (sandboxed). bubblewrap v0.8.0
# bubblewrap.c: the parent writes the child's pid to --info-fd right after cloning it (:2935-2941); the child forks
# a pid 1 of bubblewrap's before running the command only without --as-pid-1 (:3284)
_NAMESPACES = ["--unshare-pid", "--as-pid-1", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--die-with-parent",
               "--new-session", "--cap-drop", "ALL"]
# Made by an unprivileged user: in a user namespace of the sandbox's own, which may not nest another
_UNPRIVILEGED = ["--unshare-user", "--disable-userns"]
# Made by root: no user namespace (its mount sources are then read as root, the job's never), and the spawner
# keeps just what it needs to become the job's own user (seccomp refuses a new user namespace there)
_PRIVILEGED = ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
_FILESYSTEM = ["--ro-bind", "/", "/", "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev"]
# A uid per attempt where the launcher is root: from a range no login or container user is given by default
# (Debian's subordinate ids start at 100000 in blocks of 65536; these lie far above, below 2**31).
JOB_UID_BASE, JOB_UID_SPAN = 1_500_000_000, 1 << 24
_SQLITE = "sqlite:///"


def _machine_memory_mb() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20


@dataclass(frozen=True)
class SandboxLimits:
    """What bounds each sandboxed job: its memory (all its processes and its ``/tmp`` and ``/dev/shm`` together;
    default three quarters of the machine's), its processes, the size of each of its tmpfs, and the endpoints
    (``host:port``) it may reach outside its own network."""

    memory_mb: int = dataclasses.field(default_factory=lambda: _machine_memory_mb() * 3 // 4)
    max_processes: int = 4096
    tmp_mb: int = 1024
    egress: tuple[str, ...] = ()

    def __post_init__(self):
        for name in ("memory_mb", "max_processes", "tmp_mb"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"local_job_{name}: must be a whole number of at least 1 (got {value!r})")
        for value in self.egress:
            egress.endpoint(value, "local_job_egress")


class SandboxMode(str, Enum):
    """``required`` (the default): refuse to run a job without a sandbox; ``auto``: sandbox every job where
    bubblewrap works, else warn once and run unsandboxed; ``off``: never (a single-tenant machine)."""

    AUTO = "auto"
    REQUIRED = "required"
    OFF = "off"


@functools.cache
def unavailable() -> str | None:
    """Why no sandbox can be made here (None: it can), found once per process by making one."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap is not installed (no bwrap on PATH; `make bwrap` installs it)"
    try:
        probe = subprocess.run([bwrap, *_NAMESPACES, *_mode(os.geteuid() == 0), *_FILESYSTEM, "--", "/bin/true"], capture_output=True,
                               text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not be run: {exc}"
    if probe.returncode != 0:
        return f"bwrap cannot make a sandbox here (the kernel or its settings refuse namespaces): {probe.stderr.strip()}"
    return None


def hidden_paths(root: Path, environ: dict[str, str] | None = None, extra: Sequence[str] = ()) -> list[str]:
    """What a job must not see: Airflow's home, config and SQLite DB, the backend's root, and ``extra`` (what
    the caller knows of Airflow's configuration: a metadata DB, log folder or secrets file set elsewhere)."""
    environ = os.environ if environ is None else environ
    paths = [environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow"), str(root), *extra]
    if config := environ.get("AIRFLOW_CONFIG"):
        paths.append(config)
    paths += sqlite_files(environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", ""))
    return [os.path.realpath(path) for path in paths if path]


def sqlite_files(url: str) -> list[str]:
    """The files of a SQLAlchemy SQLite URL's database (none for any other database): the file itself and
    its write-ahead log, shared-memory index and rollback journal, which hold recent rows of it too."""
    database = url[len(_SQLITE):].split("?")[0] if url.startswith(_SQLITE) else ""
    return [database + suffix for suffix in ("", "-wal", "-shm", "-journal")] if database else []


def job_uid(attempt: str) -> int | None:
    """The host user an attempt's workers run as: one of its own (from the attempt's id) where the launcher is
    root (the spawner becomes it), else None (the submitter's own, unprivileged, in a user namespace)."""
    if os.geteuid() != 0:
        return None
    return JOB_UID_BASE + int(attempt[:8], 16) % JOB_UID_SPAN


def mounts(name: str, hidden: list[str], writable: list[tuple[str, str]], readable: list[str],
           uid: int | None) -> dict:
    """The sandbox of job ``name`` as data (for ``job.json``): paths to hide, the job's writable directories
    (``(field, path)`` pairs; where one lies in a directory named after the job, that directory's parent is
    hidden too, so that no other job's directory shows) and read-only inputs to show again. For a job of its
    own ``uid``, a directory on the way to one of them that others may not enter is hidden too, so that what
    is bound inside it is reached through the sandbox's own directories.

    Raises:
        ValueError: a writable directory would show what must stay hidden (it contains a hidden path), or
            goes through a symbolic link (which a job may have written: it would be the mount's source).
    """
    own, parents = [], []
    for field, directory in writable:
        path = workdirs.real_directory(directory, field)
        job_dir = next((p for p in (path, *path.parents) if p.name == name), None)
        if job_dir is not None and len(job_dir.parent.parts) >= 3:  # never hides / or a top-level directory
            parents.append(str(job_dir.parent))
        for secret in hidden:
            if Path(secret) == path or Path(secret).is_relative_to(path):
                raise ValueError(f"{field}: {directory!r} contains {secret}, which a job must not see; give the "
                                 "job a directory of its own")
        own.append(str(path))
    readable = sorted({os.path.realpath(p) for p in readable} - set(own))
    veiled = closed_ancestors([*own, *readable]) if uid is not None else []
    return {"hide": sorted(set(hidden + parents + veiled)), "writable": sorted(set(own)), "readable": readable,
            "uid": uid}


def argv(sandbox: dict, seccomp_fd: int | None, egress_dir: str, hosts: str, low_ports: bool) -> list[str]:
    """``bwrap`` and its options for a job's ``mounts`` (paths that do not exist are left out: nothing
    to hide or to show), up to ``--``. Its command starts in ``/tmp`` (its private one). ``egress_dir``: the
    launcher's relay sockets, shown read-only at ``egress.INSIDE``; ``hosts``: a file shown as ``/etc/hosts``; ``low_ports``: the
    job may listen below port 1024 (in its own network only: a relayed endpoint there)."""
    tmp = sandbox.get("tmp_bytes")
    tmpfs = ["--size", str(tmp), "--perms", "1777"] if tmp else ["--perms", "1777"]  # open to all, as the machine's
    args = [shutil.which("bwrap") or "bwrap", *_NAMESPACES, *_mode(sandbox.get("uid") is not None), *_FILESYSTEM,
            *tmpfs, "--tmpfs", PRIVATE_TMP, *tmpfs, "--tmpfs", "/dev/shm"]
    if low_ports:
        args += ["--cap-add", "CAP_NET_BIND_SERVICE"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    shown = [(p, "--ro-bind") for p in sandbox["readable"]] + [(p, "--bind") for p in sandbox["writable"]]
    emptied = [path for path in sorted(sandbox["hide"], key=_depth) if os.path.isdir(path)]  # outer ones first
    # Outer paths first, hiding before binding at one depth: a bind shown again (an environment under /tmp)
    # never uncovers a hidden path inside it, and what is bound inside a hidden directory stays bound.
    steps = [(p, "hide") for p in sandbox["hide"]] + shown
    for path, option in sorted(steps, key=lambda step: (_depth(step[0]), step[1] != "hide")):
        if option == "hide" and os.path.isdir(path):
            args += ["--tmpfs", path]
        elif option == "hide" and os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
        elif option != "hide" and os.path.exists(path):
            args += [option, path, path]
    for path in _made_on_the_way([p for p, _ in shown if os.path.exists(p)], [*emptied, PRIVATE_TMP]):
        args += ["--chmod", "0755", path]  # bwrap makes them 0700: the job's own user could not pass them
    for path in emptied:  # the empty directories that hide things are read-only too (binds in them stay as bound)
        args += ["--remount-ro", path]
    args += ["--ro-bind", egress_dir, egress.INSIDE, "--ro-bind", hosts, "/etc/hosts"]
    return [*args, "--setenv", "TMPDIR", "/tmp", "--unsetenv", JOB_UID_ENV,  # the spawner: a stop's SIGTERM is for the workers
             "--chdir", "/tmp", "--"]


def unseen_arguments(command: list[str], sandbox: dict) -> list[str]:
    """The paths ``command`` names (``/p`` or ``--flag=/p``) that exist under this machine's ``/tmp`` but
    that the job cannot see: its ``/tmp`` is its own, and nothing bound brings them back."""
    shown = [*sandbox["readable"], *sandbox["writable"]]
    paths = (argument.partition("=")[2] if argument.startswith("-") else argument for argument in command)
    return [path for path in paths if path.startswith(PRIVATE_TMP + "/") and os.path.exists(path)
            and not inside(path, shown)]


def inside(path: str, roots: list[str]) -> bool:
    """Whether ``path`` is one of ``roots`` or below one."""
    real = Path(os.path.realpath(path))
    return any(real == Path(root) or real.is_relative_to(root) for root in roots)


def _made_on_the_way(shown: list[str], emptied: list[str]) -> list[str]:
    """The directories bwrap makes inside an emptied one (or the job's own ``/tmp``) to reach what is shown
    there, outer ones first: those whose innermost cover is an emptied directory, not a bind (a bound folder's
    are its own, unless a hidden one inside it is emptied again)."""
    made = set()
    for path in shown:
        for ancestor in Path(path).parents:
            covers = [(Path(e), "made") for e in emptied if ancestor != Path(e) and ancestor.is_relative_to(e)]
            covers += [(Path(b), "bound") for b in shown if ancestor.is_relative_to(b)]
            if covers and max(covers, key=lambda cover: len(cover[0].parts))[1] == "made":
                made.add(str(ancestor))
    return sorted(made - set(emptied), key=_depth)


def _mode(privileged: bool) -> list[str]:
    return _PRIVILEGED if privileged else _UNPRIVILEGED


def closed_ancestors(paths: list[str]) -> list[str]:
    """The directories on the way to ``paths`` that others may not enter (no execute bit for them)."""
    closed = set()
    for path in paths:
        for ancestor in Path(path).parents:
            try:
                if not os.stat(ancestor).st_mode & 0o001:
                    closed.add(str(ancestor))
            except OSError:
                continue
    return sorted(closed)


def _depth(path: str) -> int:
    return len(Path(path).parts)
