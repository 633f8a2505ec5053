"""The directories a sandboxed job may write, made by its submitter for each attempt: paths no job can choose.

A job writes into its directories whatever it likes, symbolic links included. So nothing a job wrote is ever
followed on this side, nor becomes a mount source of a later attempt: only the job's writable directories
themselves are bound (each a mount point inside the sandbox, which no job can rename or replace), each must be
a real path with no link on the way, made by the submitter and handed to the attempt's user with what an
earlier attempt left in it (its checkpoints: ``own_tree``). What one job reads of another's (a model, a shard)
is reached through no link either: ``linkless``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def real_directory(path: str, field: str) -> Path:
    """``path`` resolved, through no symbolic link a job could have made: only root's links are followed (the
    machine's own, such as a mounted volume's; no job runs as root). Only its last components may be missing.

    Raises:
        ValueError: naming ``field``: a component is another user's link, or not a directory.
    """
    current = Path("/")
    parts = Path(os.path.abspath(path)).parts[1:]
    for index, part in enumerate(parts):
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return current.joinpath(*parts[index + 1:])
        if stat.S_ISLNK(info.st_mode) and info.st_uid != 0:
            raise ValueError(f"{field}: {path!r} goes through the symbolic link {current}; a job's directories must "
                             "be real paths (a link may have been written by a job)")
        if stat.S_ISLNK(info.st_mode):
            current = Path(os.path.realpath(current))
            if not current.exists():
                return current.joinpath(*parts[index + 1:])
            info = os.stat(current)
        if not stat.S_ISDIR(info.st_mode):
            raise ValueError(f"{field}: {current} is not a directory")
    return current


def own_tree(directory: str, field: str, uid: int | None) -> None:
    """A writable directory of the job: a real path, created if missing, and handed with what an earlier attempt
    left in it to ``uid`` (None: the submitter's own user, nothing to hand over). Links are not followed, and a
    file with a second name is left as it is (it may be another's file, linked in by a job)."""
    path = _made(directory, field)
    if uid is None:
        return
    os.chown(path, uid, uid, follow_symlinks=False)
    for root, dirs, files in os.walk(path):  # (never into a link to a directory)
        for entry in dirs + files:
            info = os.lstat(os.path.join(root, entry))
            if stat.S_ISDIR(info.st_mode) or stat.S_ISLNK(info.st_mode) or info.st_nlink == 1:
                os.chown(os.path.join(root, entry), uid, uid, follow_symlinks=False)
            else:
                import logging  # (here: the launcher, which imports this module, starts faster without it)

                logging.getLogger(__name__).warning("%s: not handing %s to the job's user: it has %d names", field,
                             os.path.join(root, entry), info.st_nlink)


def shared_directory(directory: str, field: str) -> None:
    """An output directory the jobs of a run share (a preprocessing step's shards, each job's own file in it):
    a real path, created if missing, writable by each job's user (they differ per attempt). It lies under the
    backend's root, which no other user of the machine can enter."""
    os.chmod(_made(directory, field), 0o777)


def _made(directory: str, field: str) -> Path:
    """``directory`` created (with its parents) where ``real_directory`` allows, and checked again once made:
    nothing was swapped in meanwhile."""
    path = real_directory(directory, field)
    path.mkdir(parents=True, exist_ok=True)
    real_directory(directory, field)
    return path


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
