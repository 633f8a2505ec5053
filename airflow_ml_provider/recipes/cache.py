"""What validating a recipe file produces (the validated recipe and every trial's payload), cached by content.

The DAG processor parses the recipes DAG file again every cycle, in a fresh process, although recipe files
rarely change: an entry keyed by the SHA-256 of the file's text, this package's version and the Python
version lets a parse skip YAML composition, validation and trial sampling (most of a large recipe's parse
time). A changed file has a new key, so it is validated again: a bad recipe still fails at parse, naming
its field. Entries are JSON (never pickle) in a folder only this user can write (``[ml_training]
recipe_cache_dir``, by default ``$AIRFLOW_HOME/ml/recipe-cache``; empty disables the cache); an entry
that does not read back as the expected shape is ignored.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

MAX_ENTRY_BYTES = 64 << 20
MAX_ENTRIES = 512  # oldest entries are removed past this (each edit of a recipe adds one)


def key(text: str) -> str:
    from airflow_ml_provider import __version__

    salt = f"{__version__}\0{sys.version_info[0]}.{sys.version_info[1]}\0"
    return hashlib.sha256((salt + text).encode("utf-8", "surrogatepass")).hexdigest()


def folder() -> Path | None:
    """The cache folder, created private; None when disabled or not safe to use (a link, another owner's,
    writable by others)."""
    try:
        from airflow.sdk import conf

        configured = conf.get("ml_training", "recipe_cache_dir", fallback=None)
    except ImportError:
        configured = None
    if configured is None:
        configured = str(Path(os.environ.get("AIRFLOW_HOME", "~/airflow")).expanduser() / "ml" / "recipe-cache")
    if not configured:
        return None
    path = Path(configured)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        return None
    return path


def load(entry_key: str) -> dict[str, Any] | None:
    """The entry ``{"recipe": {...}, "trials": {experiment: [payload, ...]}}``, or None."""
    where = folder()
    if where is None:
        return None
    try:
        fd = os.open(where / f"{entry_key}.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ENTRY_BYTES:
            return None
        with os.fdopen(os.dup(fd), "rb") as stream:
            entry = json.loads(stream.read(MAX_ENTRY_BYTES))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    trials = entry.get("trials") if isinstance(entry, dict) else None
    if not (isinstance(entry.get("recipe"), dict) and isinstance(trials, dict) and all(
            isinstance(payloads, list) and all(isinstance(p, str) for p in payloads) for payloads in trials.values())):
        return None
    return entry


def store(entry_key: str, entry: dict[str, Any]) -> None:
    """Write the entry atomically (a reader sees the whole file or none); failures only cost the cache."""
    where = folder()
    if where is None:
        return
    with contextlib.suppress(OSError):
        fd, tmp = tempfile.mkstemp(dir=where, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as stream:
                json.dump(entry, stream, separators=(",", ":"))
            os.replace(tmp, where / f"{entry_key}.json")
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        entries = sorted(where.glob("*.json"), key=lambda p: p.stat().st_mtime)
        for old in entries[:-MAX_ENTRIES]:
            old.unlink(missing_ok=True)
