"""The files of an input dataset a task maps a sharded job over: a folder, an object-storage prefix or a glob.

A local dataset must lie in the data roots (``TrainingBackendHook.data_roots``), every file of it once symlinks
and ``..`` are resolved, so that what a Param names never leads a job (or the listing) out of them; nothing of
a file's content is read here. Files are listed in name order, so shard ``i`` is the same files every attempt.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

from airflow_ml_provider.artifact_layout import is_remote
from airflow_ml_provider.jobs.shards import MAX_SHARDS
from airflow_ml_provider.operators.params import CONTROL_CHARACTER
from airflow_ml_provider.runtime import storage
from airflow_ml_provider.runtime.tabular import SUFFIXES

_MAGIC = ("*", "?", "[")


def dataset_files(location: str, roots: Sequence[str], field: str = "input") -> list[str]:
    """The dataset's Parquet, CSV and NPZ files (paths or URLs), sorted.

    Raises:
        ValueError: naming ``field``: outside the data roots, no such files, or more than a job maps.
    """
    if not isinstance(location, str) or not location or CONTROL_CHARACTER.search(location):
        raise ValueError(f"{field}: {location!r} is not a folder, object-storage prefix or glob of data files")
    files = _remote(location) if is_remote(location) else _local(location, roots, field)
    files = sorted(path for path in files if path.lower().endswith(SUFFIXES))
    if not files:
        raise ValueError(f"{field}: no {', '.join(SUFFIXES)} file in {location!r}")
    if len(files) > MAX_SHARDS:
        raise ValueError(f"{field}: {len(files):,} files, more than the {MAX_SHARDS:,} one job maps over")
    return files


def folder(location: str) -> str:
    """The folder a dataset lies in (a glob's part before its first wildcard), what its job is shown."""
    if any(magic in location for magic in _MAGIC):
        location = location[:min(location.index(m) for m in _MAGIC if m in location)]
        return location.rstrip("/") if location.endswith("/") else os.path.dirname(location)
    return location if not location.lower().endswith(SUFFIXES) else os.path.dirname(location)


def _local(location: str, roots: Sequence[str], field: str) -> list[str]:
    if not os.path.isabs(location):
        raise ValueError(f"{field}: {location!r} is not an absolute path, nor an object-storage URL")
    real_roots = [os.path.realpath(root) for root in roots]
    if not _inside(os.path.realpath(folder(location)), real_roots):
        raise ValueError(f"{field}: {location!r} is outside the data roots ({', '.join(roots)}); more roots are set "
                         "by [ml_training] data_roots or the ml_training connection's data_roots extra")
    if any(magic in location for magic in _MAGIC):
        found = glob.glob(location)
    elif os.path.isdir(location):
        found = [os.path.join(location, name) for name in os.listdir(location)]
    else:
        found = [location] if os.path.isfile(location) else []
    files = [os.path.realpath(path) for path in found if os.path.isfile(path)]
    if outside := [path for path in files if not _inside(path, real_roots)]:
        raise ValueError(f"{field}: {len(outside)} file(s) of {location!r} lead out of the data roots "
                         f"(through a link), e.g. {outside[0]!r}")
    return files


def _remote(location: str) -> list[str]:
    fs, path = storage.resolve(location)
    if any(magic in path for magic in _MAGIC):
        return [storage.url(fs, found) for found in fs.glob(path) if fs.isfile(found)]
    if fs.isdir(path):
        return [storage.url(fs, entry["name"]) for entry in fs.ls(path, detail=True) if entry["type"] == "file"]
    return [storage.url(fs, path)] if fs.isfile(path) else []


def _inside(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)
