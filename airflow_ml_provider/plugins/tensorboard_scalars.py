"""A job's TensorBoard scalars for the training view, read by tensorboard's own event-file reader
(``EventAccumulator``) from the TensorBoard directory the task recorded in its XCom (never a path from a request).

The view runs in the API server, on files a job wrote: it reads only what it bounds. The directory's own event
files (``*tfevents*`` directly in it; TensorBoard's run subfolders are not read), at most ``MAX_FILES`` of the
newest, at most ``MAX_BYTES`` in all (about 50,000 points; tensorboard's pure-Python reader parses about 2 MB/s
here, and imports in 1.5 s at the first page that shows scalars), are copied into a private temporary folder and parsed there, keeping
``MAX_POINTS`` per tag (the reader's reservoir, which keeps the last) of ``MAX_TAGS`` tags. Locally, no link is
followed: the directory and each file are opened with ``O_NOFOLLOW`` (a job may have replaced its TensorBoard
directory with a link to files it should not show), and only regular files are read. On object storage
(``s3://``...) the files are read through fsspec (``runtime.storage``) with the API server's own credentials.
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile
import threading
from typing import Any

from airflow_ml_provider.artifact_layout import is_remote

MAX_FILES, MAX_BYTES, MAX_TAGS, MAX_POINTS, TAG_CHARS = 16, 2 * 2**20, 24, 500, 200
CACHED = 16  # parsed directories kept, by their files' names and sizes (a page refreshes every few seconds)
_NOFOLLOW = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def read_scalars(logdir: str) -> dict[str, Any]:
    """``{"dir": logdir, "scalars": {tag: [[step, value], ...]}, "note": why something was not read, or None}``."""
    out: dict[str, Any] = {"dir": logdir, "scalars": {}, "note": None}
    with tempfile.TemporaryDirectory(prefix="aml-view-tb-") as copy:
        try:
            copied, skipped = (_copy_remote if is_remote(logdir) else _copy_local)(logdir, copy)
        except FileNotFoundError:
            out["note"] = "no event files yet"
            return out
        except OSError as exc:
            out["note"] = f"not read: {exc.strerror or exc}"
            return out
        if not copied:
            out["note"] = "no event files yet"
            return out
        if skipped:
            out["note"] = f"{skipped} event file(s) not read (the view reads {MAX_FILES} files, {MAX_BYTES >> 20} MiB)"
        key = (logdir, tuple(sorted((name, os.path.getsize(os.path.join(copy, name))) for name in os.listdir(copy))))
        with _lock:  # the API server's threads share the cache (a page is served in its thread pool)
            scalars = _parsed.get(key)
        if scalars is None:
            scalars = _parse(copy)
            with _lock:
                while len(_parsed) >= CACHED:
                    _parsed.pop(next(iter(_parsed)))
                _parsed[key] = scalars
        out["scalars"] = scalars
    return out


_parsed: dict[tuple, dict[str, list[list[float]]]] = {}
_lock = threading.Lock()


def _parse(folder: str) -> dict[str, list[list[float]]]:
    from tensorboard.backend.event_processing import event_accumulator as ea

    logging.getLogger("tensorboard").setLevel(logging.WARNING)  # not a line per read in the API server's log
    guidance = {ea.SCALARS: MAX_POINTS, ea.TENSORS: 1, ea.HISTOGRAMS: 1, ea.COMPRESSED_HISTOGRAMS: 1,
                ea.IMAGES: 1, ea.AUDIO: 1}  # (0 would be "keep all")
    accumulator = ea.EventAccumulator(folder, size_guidance=guidance)
    accumulator.Reload()
    tags = sorted(accumulator.Tags().get(ea.SCALARS, []))[:MAX_TAGS]
    return {tag[:TAG_CHARS]: [[event.step, event.value] for event in accumulator.Scalars(tag)] for tag in tags}


def _copy_local(logdir: str, copy: str) -> tuple[int, int]:
    """Copy the newest event files of ``logdir`` without following a link (the folder itself included)."""
    parent, name = os.path.split(os.path.normpath(logdir))
    parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = os.open(name, _NOFOLLOW | os.O_DIRECTORY, dir_fd=parent_fd)  # ELOOP/ENOTDIR for a link
    finally:
        os.close(parent_fd)
    try:
        found = []
        with os.scandir(fd) as entries:
            for entry in entries:
                if "tfevents" in entry.name and entry.is_file(follow_symlinks=False):
                    found.append((entry.stat(follow_symlinks=False).st_mtime, entry.name))
        chosen, budget = sorted(found, reverse=True)[:MAX_FILES], MAX_BYTES
        copied = 0
        for _, file_name in chosen:
            try:
                file_fd = os.open(file_name, _NOFOLLOW, dir_fd=fd)
            except OSError:
                continue  # gone (or became a link) since it was listed
            with os.fdopen(file_fd, "rb") as source:
                if not stat.S_ISREG(os.fstat(source.fileno()).st_mode) or budget <= 0:
                    continue
                data = source.read(budget)
            budget -= len(data)
            _write(copy, file_name, data)
            copied += 1
        return copied, len(found) - copied
    finally:
        os.close(fd)


def _copy_remote(logdir: str, copy: str) -> tuple[int, int]:
    from airflow_ml_provider.runtime import storage

    fs, path = storage.resolve(logdir)
    entries = [e for e in fs.ls(path, detail=True) if e.get("type") == "file" and "tfevents" in e["name"]]
    entries.sort(key=lambda e: e["name"], reverse=True)  # tensorboardX names them by their start time
    budget, copied = MAX_BYTES, 0
    for entry in entries[:MAX_FILES]:
        if budget <= 0:
            break
        size = min(int(entry.get("size") or 0), budget)
        data = fs.cat_file(entry["name"], start=0, end=size) if size else b""
        budget -= len(data)
        _write(copy, os.path.basename(entry["name"]), data)
        copied += 1
    return copied, len(entries) - copied


def _write(folder: str, name: str, data: bytes) -> None:
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:200] or "events"
    with open(os.path.join(folder, safe), "wb") as target:
        target.write(data)
