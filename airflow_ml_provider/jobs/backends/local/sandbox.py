"""Each local job's sandbox, made with Debian's bubblewrap (``bwrap``): Linux namespaces, no daemon, no root.

Inside it a job's processes have their own PID namespace (they see no other process: not Airflow's, not
another job's, so no ``/proc/<pid>/environ`` of theirs) and IPC namespace, no capabilities, the whole
filesystem read-only, a private ``/tmp``, and nothing of what ``hidden`` names: ``$AIRFLOW_HOME``
(``airflow.cfg``, the metadata DB, logs), ``$AIRFLOW_CONFIG``, a SQLite metadata DB named by
``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``, what the backend's ``hide`` adds (the hook: Airflow's configured
SQLite DB, log folder and local secrets files), and the local backend's root (the job records, locks and owner
key, every job's artifacts). Bound back into that view, writable: the job's own directories (its
``model_dir`` and ``checkpoint_dir``, widened to the job's own directory, ``.../<job name>``, whose
parent is hidden so that no other job's directory shows) and ``<root>/data``, the runs' data shards,
which every job shares (preprocessing jobs write their shards there); read-only: the training
environment and this package, should they lie under a hidden path. The network is the host's (Horovod and LightGBM meet on loopback). When the sandbox's bwrap
process dies, the kernel ends every process left in its PID namespace: nothing of a job outlives it.

The submitter computes the mounts (``mounts``, stored in the job's plan); the launcher turns them into
``bwrap`` argv (``argv``) once the job's directories exist.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from enum import Enum
from pathlib import Path

PRIVATE_TMP = "/tmp"  # each job gets its own, empty: what lies under the machine's /tmp is shown only when bound
_BASE = ["--unshare-pid", "--unshare-ipc", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
         "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", PRIVATE_TMP]
_SQLITE = "sqlite:///"


class SandboxMode(str, Enum):
    """``auto``: sandbox every job where bubblewrap works, else warn once and run unsandboxed;
    ``required``: refuse to run a job without one; ``off``: never (a single-tenant machine)."""

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
        probe = subprocess.run([bwrap, *_BASE, "--", "/bin/true"], capture_output=True, text=True, timeout=30)
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


def mounts(name: str, hidden: list[str], writable: list[tuple[str, str]], readable: list[str]) -> dict:
    """The sandbox of job ``name`` as data (for ``job.json``): paths to hide, the job's own writable
    directories (``(field, path)`` pairs, each widened to the job's own directory when one of its ancestors is named after the
    job; that directory's parent is then hidden too) and read-only inputs to show again.

    Raises:
        ValueError: a writable directory would show what must stay hidden (it contains a hidden path).
    """
    own, parents = [], []
    for field, directory in writable:
        path = Path(os.path.realpath(directory))
        job_dir = next((p for p in (path, *path.parents) if p.name == name), None)
        if job_dir is not None and len(job_dir.parent.parts) >= 3:  # never hides / or a top-level directory
            path = job_dir
            parents.append(str(job_dir.parent))
        for secret in hidden:
            if Path(secret) == path or Path(secret).is_relative_to(path):
                raise ValueError(f"{field}: {directory!r} contains {secret}, which a job must not see; give the "
                                 "job a directory of its own")
        own.append(str(path))
    return {"hide": sorted(set(hidden + parents)), "writable": sorted(set(own)),
            "readable": sorted({os.path.realpath(p) for p in readable} - set(own))}


def argv(sandbox: dict, cwd: str | None) -> list[str]:
    """``bwrap`` and its options for a job's ``mounts`` (paths that do not exist are left out: nothing
    to hide or to show). The command starts in ``cwd``, by default ``/tmp`` (its private one)."""
    args = [shutil.which("bwrap") or "bwrap", *_BASE]
    emptied = [path for path in sorted(sandbox["hide"], key=_depth) if os.path.isdir(path)]  # outer ones first
    # Outer paths first, hiding before binding at one depth: a bind shown again (an environment under /tmp)
    # never uncovers a hidden path inside it, and what is bound inside a hidden directory stays bound.
    steps = ([(p, "hide") for p in sandbox["hide"]] + [(p, "--ro-bind") for p in sandbox["readable"]]
             + [(p, "--bind") for p in sandbox["writable"]])
    for path, option in sorted(steps, key=lambda step: (_depth(step[0]), step[1] != "hide")):
        if option == "hide" and os.path.isdir(path):
            args += ["--tmpfs", path]
        elif option == "hide" and os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
        elif option != "hide" and os.path.exists(path):
            args += [option, path, path]
    for path in emptied:  # the empty directories that hide things are read-only too (binds in them stay as bound)
        args += ["--remount-ro", path]
    return [*args, "--setenv", "TMPDIR", "/tmp", "--chdir", cwd or "/tmp", "--"]


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


def _depth(path: str) -> int:
    return len(Path(path).parts)
