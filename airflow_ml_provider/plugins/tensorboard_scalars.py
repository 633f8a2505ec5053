"""A job's TensorBoard scalars for the training view, read by tensorboard's own event-file reader
(``EventAccumulator``) from the TensorBoard directory the task recorded in its XCom (never a path from a request).

TensorBoard's convention is one run per folder: the directory's own event files are run ``"."``, and each folder
directly in it (``train/``, ``validation/``, a rank's) is a run named by that folder; deeper folders are not read.
The view runs in the API server, on files a job wrote: it reads only what it bounds. At most ``MAX_RUNS`` folders
(the newest), at most ``MAX_FILES`` event files (``*tfevents*``) of the newest in all, at most ``MAX_BYTES`` in all
(about 50,000 points; tensorboard's pure-Python reader parses about 2 MB/s here, and imports in 1.5 s at the first
page that shows scalars), are copied into a private temporary folder and parsed there, keeping ``MAX_POINTS`` per
tag (the reader's reservoir, which keeps the last) of ``MAX_TAGS`` tags of all runs. Locally, no link is followed:
the directory, each run folder and each file are opened with ``O_NOFOLLOW`` relative to the descriptor of the
folder holding them (a job may have replaced its TensorBoard directory, a run folder or a file with a link to
files it should not show), and only regular files are read. On object storage (``s3://``...) the files are read
through fsspec (``runtime.storage``) with the API server's own credentials.
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile
import threading
from typing import Any

from airflow_ml_provider.artifact_layout import is_remote

MAX_RUNS, MAX_FILES, MAX_BYTES, MAX_TAGS, MAX_POINTS, TAG_CHARS = 16, 16, 2 * 2**20, 24, 500, 200
TOP = "."  # the run of the directory's own event files
CACHED = 16  # parsed directories kept, by their files' names and sizes (a page refreshes every few seconds)
_NOFOLLOW = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def read_scalars(logdir: str) -> dict[str, Any]:
    """``{"dir": logdir, "runs": {run: {tag: [[step, value], ...]}}, "note": why something was not read, or None}``:
    ``run`` is ``"."`` for the directory's own files, else the name of the folder directly in it."""
    out: dict[str, Any] = {"dir": logdir, "runs": {}, "note": None}
    with tempfile.TemporaryDirectory(prefix="aml-view-tb-") as copy:
        try:
            runs, skipped = (_copy_remote if is_remote(logdir) else _copy_local)(logdir, copy)
        except FileNotFoundError:
            out["note"] = "no event files yet"
            return out
        except OSError as exc:
            out["note"] = f"not read: {exc.strerror or exc}"
            return out
        if not runs:
            out["note"] = "no event files yet"
            return out
        if skipped:
            out["note"] = (f"{skipped} event file(s) or run folder(s) not read (the view reads {MAX_FILES} files, "
                           f"{MAX_BYTES >> 20} MiB, {MAX_RUNS} run folders)")
        key = (logdir, tuple((run, *sorted((name, os.path.getsize(os.path.join(folder, name)))
                                           for name in os.listdir(folder))) for run, folder in runs))
        with _lock:  # the API server's threads share the cache (a page is served in its thread pool)
            parsed = _parsed.get(key)
        if parsed is None:
            parsed = _parse(runs)
            with _lock:
                while len(_parsed) >= CACHED:
                    _parsed.pop(next(iter(_parsed)))
                _parsed[key] = parsed
        out["runs"] = parsed
    return out


_parsed: dict[tuple, dict[str, dict[str, list[list[float]]]]] = {}
_lock = threading.Lock()


def _parse(runs: list[tuple[str, str]]) -> dict[str, dict[str, list[list[float]]]]:
    """Each copied run's scalars, at most ``MAX_TAGS`` tags in all (the first runs' first, ``"."`` first)."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    logging.getLogger("tensorboard").setLevel(logging.WARNING)  # not a line per read in the API server's log
    guidance = {ea.SCALARS: MAX_POINTS, ea.TENSORS: 1, ea.HISTOGRAMS: 1, ea.COMPRESSED_HISTOGRAMS: 1,
                ea.IMAGES: 1, ea.AUDIO: 1}  # (0 would be "keep all")
    parsed, left = {}, MAX_TAGS
    for run, folder in sorted(runs, key=lambda item: (item[0] != TOP, item[0])):
        accumulator = ea.EventAccumulator(folder, size_guidance=guidance)  # the folder's own files, not deeper
        accumulator.Reload()
        tags = sorted(accumulator.Tags().get(ea.SCALARS, []))[:left]
        if tags:
            parsed[run] = {tag[:TAG_CHARS]: [[e.step, e.value] for e in accumulator.Scalars(tag)] for tag in tags}
            left -= len(tags)
    return parsed


def _open_dir(name: str, dir_fd: int | None) -> int:
    """A folder's descriptor, never through a link (ELOOP/ENOTDIR for one)."""
    return os.open(name, _NOFOLLOW | os.O_DIRECTORY, dir_fd=dir_fd)


def _copy_local(logdir: str, copy: str) -> tuple[list[tuple[str, str]], int]:
    """Copy the newest event files of ``logdir`` and of its run folders, following no link; returns the copied
    runs (name, folder in ``copy``) and how many files or folders were left."""
    parent, name = os.path.split(os.path.normpath(logdir))
    parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = _open_dir(name, parent_fd)
    finally:
        os.close(parent_fd)
    descriptors = {TOP: fd}
    try:
        files, folders = [], []
        with os.scandir(fd) as entries:
            for entry in entries:
                if "tfevents" in entry.name and entry.is_file(follow_symlinks=False):
                    files.append((entry.stat(follow_symlinks=False).st_mtime, TOP, entry.name))
                elif entry.is_dir(follow_symlinks=False):  # a link to a folder is no run
                    folders.append((entry.stat(follow_symlinks=False).st_mtime, entry.name))
        folders.sort(reverse=True)
        skipped = max(0, len(folders) - MAX_RUNS)
        for _, run in folders[:MAX_RUNS]:
            try:
                descriptors[run] = _open_dir(run, fd)
            except OSError:
                skipped += 1  # gone, or became a link, since it was listed
                continue
            with os.scandir(descriptors[run]) as entries:
                files += [(entry.stat(follow_symlinks=False).st_mtime, run, entry.name) for entry in entries
                          if "tfevents" in entry.name and entry.is_file(follow_symlinks=False)]
        files.sort(reverse=True)
        skipped += max(0, len(files) - MAX_FILES)
        budget, runs = MAX_BYTES, {}
        for _, run, file_name in files[:MAX_FILES]:
            try:
                file_fd = os.open(file_name, _NOFOLLOW, dir_fd=descriptors[run])
            except OSError:
                skipped += 1  # gone (or became a link) since it was listed
                continue
            with os.fdopen(file_fd, "rb") as source:
                if not stat.S_ISREG(os.fstat(source.fileno()).st_mode) or budget <= 0:
                    skipped += 1
                    continue
                data = source.read(budget)
            budget -= len(data)
            runs.setdefault(run, os.path.join(copy, str(len(runs))))
            _write(runs[run], file_name, data)
        return sorted(runs.items()), skipped
    finally:
        for descriptor in descriptors.values():
            os.close(descriptor)


def _copy_remote(logdir: str, copy: str) -> tuple[list[tuple[str, str]], int]:
    from airflow_ml_provider.runtime import storage

    fs, path = storage.resolve(logdir)
    listed = fs.ls(path, detail=True)
    folders = sorted((e["name"] for e in listed if e.get("type") == "directory"), reverse=True)
    files = [(e, TOP) for e in listed if e.get("type") == "file" and "tfevents" in os.path.basename(e["name"])]
    for folder in folders[:MAX_RUNS]:
        files += [(e, os.path.basename(folder.rstrip("/"))) for e in fs.ls(folder, detail=True)
                  if e.get("type") == "file" and "tfevents" in os.path.basename(e["name"])]
    # tensorboardX names them by their start time: the newest last
    files.sort(key=lambda item: os.path.basename(item[0]["name"]), reverse=True)
    skipped = max(0, len(folders) - MAX_RUNS) + max(0, len(files) - MAX_FILES)
    budget, runs = MAX_BYTES, {}
    for entry, run in files[:MAX_FILES]:
        if budget <= 0:
            skipped += 1
            continue
        size = min(int(entry.get("size") or 0), budget)
        data = fs.cat_file(entry["name"], start=0, end=size) if size else b""
        budget -= len(data)
        runs.setdefault(run, os.path.join(copy, str(len(runs))))
        _write(runs[run], os.path.basename(entry["name"]), data)
    return sorted(runs.items()), skipped


def _write(folder: str, name: str, data: bytes) -> None:
    os.makedirs(folder, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:200] or "events"
    with open(os.path.join(folder, safe), "wb") as target:
        target.write(data)
