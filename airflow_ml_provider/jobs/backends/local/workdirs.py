"""The directories a sandboxed job may write, made by its submitter for each attempt: paths no job can choose.

A job writes into its directories whatever it likes, symbolic links included. So nothing a job wrote is ever
followed on this side, nor becomes a mount source of a later attempt: each attempt's own directory
(``<artifacts>/<job>``) is made anew by the submitter (the previous one moved aside, its checkpoints carried
over file by file: regular files only, never a link, a device or a file with a second name), owned by the
attempt's user; a writable directory elsewhere must be a real path (no link in it) and is never replaced.
What one job reads of another's (a model, a shard) is reached through no link either: ``linkless``.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import uuid
from pathlib import Path

_log = logging.getLogger(__name__)


def real_directory(path: str, field: str) -> Path:
    """``path`` as an absolute path with no symbolic link in it (only its last components may be missing).

    Raises:
        ValueError: naming ``field``: a component is a link, or not a directory.
    """
    current = Path("/")
    for part in Path(os.path.abspath(path)).parts[1:]:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return Path(os.path.abspath(path))
        if stat.S_ISLNK(mode):
            raise ValueError(f"{field}: {path!r} goes through the symbolic link {current}; a job's directories must "
                             "be real paths (a link may have been written by a job)")
        if not stat.S_ISDIR(mode):
            raise ValueError(f"{field}: {current} is not a directory")
    return current


def fresh_attempt_dir(job_dir: str, uid: int | None, carry: list[str]) -> None:
    """Make ``job_dir`` anew for an attempt, owned by ``uid`` (None: the submitter's own user). What an
    earlier attempt left there is moved aside; the regular files under each of ``carry`` (its checkpoint
    directories, inside ``job_dir``) come back at the same place, the rest is removed."""
    path = real_directory(job_dir, "model_dir/checkpoint_dir")
    previous = None
    if os.path.lexists(path):
        previous = path.with_name(f".{path.name}.previous-{uuid.uuid4().hex[:8]}")  # no job is named with a dot
        os.rename(path, previous)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkdir(path, 0o700)
    if previous is not None:
        for directory in carry:
            relative = os.path.relpath(directory, path)
            if not relative.startswith(".."):
                _carry(previous / relative, path / relative)
        shutil.rmtree(previous, ignore_errors=True)  # never follows a link out of it
    _own(path, uid)


def own_directory(directory: str, field: str, uid: int | None) -> None:
    """A writable directory outside the job's own one: a real path, created if missing, handed to ``uid``
    (the directory itself; what is in it stays as it is)."""
    path = real_directory(directory, field)
    path.mkdir(parents=True, exist_ok=True)
    real_directory(directory, field)  # nothing was swapped in while it was being made
    if uid is not None:
        os.chown(path, uid, uid, follow_symlinks=False)


def linkless(path: str, base: str, field: str) -> str:
    """``path`` (under ``base``, which the deployment chose) reached from ``base`` through no symbolic link, for
    what a job reads that an earlier job may have written (a model, a data shard).

    Raises:
        ValueError: naming ``field``: ``path`` is a link, or goes through one below ``base``.
    """
    current = Path(os.path.abspath(base))
    for part in Path(os.path.abspath(path)).relative_to(current).parts:
        current = current / part
        if os.path.islink(current):
            raise ValueError(f"{field}: {path!r} goes through the symbolic link {current}, which a job may have "
                             "written; name the file itself")
    return str(current)


def _carry(source: Path, target: Path) -> None:
    """Move the regular files under ``source`` to ``target`` (same file system: renames), dropping the rest."""
    try:
        entries = list(os.scandir(source)) if stat.S_ISDIR(os.lstat(source).st_mode) else []
    except FileNotFoundError:
        return
    target.mkdir(parents=True, exist_ok=True)
    for entry in entries:
        info = entry.stat(follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            _carry(Path(entry.path), target / entry.name)
        elif stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
            os.rename(entry.path, target / entry.name)
        else:
            _log.warning("Not carrying %s into the next attempt: not a regular file of the job's own", entry.path)


def _own(path: Path, uid: int | None) -> None:
    """Hand ``path`` and everything in it to ``uid`` (links are not followed; there are none after _carry)."""
    if uid is None:
        return
    os.chown(path, uid, uid, follow_symlinks=False)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, uid, follow_symlinks=False)
