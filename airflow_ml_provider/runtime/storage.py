"""Reading and writing artifacts wherever ``artifact_root`` points: a local or mounted path, or an
object store through fsspec (``s3://`` with s3fs, ``gs://`` with gcsfs). No Airflow here.

Credentials are the storage library's own: on a pod, its identity (IRSA, Workload Identity) or
``AWS_*`` variables from a Secret reference; on the local backend, the variables the backend handed
the job from the Airflow connection. ``AWS_ENDPOINT_URL_S3`` points s3fs at an S3-compatible server.

Every function takes a location: a path or URL string, or an object with ``fs`` and ``path``
attributes (Airflow's ``ObjectStoragePath``, whose filesystem carries its connection's credentials).
Writes are atomic: a local file is renamed into place, an object is uploaded whole, so a reader
never sees half a checkpoint.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from airflow_ml_provider.artifact_layout import join

Location = Any  # str | os.PathLike | ObjectStoragePath-like (has .fs and .path)


def resolve(location: Location) -> tuple[Any, str]:
    """``(filesystem, path)`` for a location."""
    if hasattr(location, "fs") and hasattr(location, "path"):
        return location.fs, location.path
    from fsspec.core import url_to_fs

    return url_to_fs(os.fspath(location))


def is_local(fs) -> bool:
    return "file" in _protocols(fs)


def url(fs, path: str) -> str:
    """The location as a string any worker can open: a plain path locally, ``s3://bucket/key`` remotely
    (never with an Airflow connection id in it)."""
    return path if is_local(fs) else fs.unstrip_protocol(path)


def child(location: Location, *parts: str) -> str:
    """``location/part/...`` as a string (see :func:`url`)."""
    fs, path = resolve(location)
    return url(fs, join(path, *parts))


def exists(location: Location) -> bool:
    fs, path = resolve(location)
    return fs.exists(path)


def isdir(location: Location) -> bool:
    fs, path = resolve(location)
    return fs.isdir(path)


def list_files(location: Location) -> list[str]:
    """The files directly in a directory (as strings, see :func:`url`), sorted; [] if it does not exist."""
    fs, path = resolve(location)
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        return []
    return sorted(url(fs, entry["name"]) for entry in entries if entry["type"] == "file")


def glob_files(pattern: Location) -> list[str]:
    """The files matching a glob (``*``, ``?``, ``[...]``; locally or on object storage), sorted; [] if none."""
    fs, path = resolve(pattern)
    return sorted(url(fs, name) for name, info in fs.glob(path, detail=True).items() if info.get("type") == "file")


def is_glob(location: Location) -> bool:
    """Whether a location is a glob pattern (its path has ``*``, ``?`` or ``[``)."""
    return any(char in str(getattr(location, "path", location)) for char in "*?[")


def delete(location: Location) -> None:
    """Remove one file (an object, remotely)."""
    fs, path = resolve(location)
    fs.rm_file(path)


@contextmanager
def open_read(location: Location, mode: str = "rb") -> Iterator[IO]:
    fs, path = resolve(location)
    if not fs.isfile(path):
        raise FileNotFoundError(f"not found: {url(fs, path)}")
    with fs.open(path, mode) as f:
        yield f


def write_atomic(location: Location, write: Callable[[str], Any], suffix: str = "") -> str:
    """Call ``write(local_path)`` on a temporary file, then move it into place in one step; returns
    the location as a string. ``suffix`` keeps writers that append an extension (``np.savez``) happy."""
    fs, path = resolve(location)
    if is_local(fs):
        directory = os.path.dirname(path) or "."
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=directory)
        os.close(fd)
        try:
            write(tmp)
            os.chmod(tmp, 0o644)  # (mkstemp's 0600) what a job publishes, the next job reads as a user of its own
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return path
    with tempfile.TemporaryDirectory(prefix="aml-upload-") as tmp_dir:
        tmp = os.path.join(tmp_dir, "part" + suffix)
        write(tmp)
        fs.put_file(tmp, path)
    return url(fs, path)


def upload(local_path: str, location: Location) -> str:
    """Copy a local file to ``location`` (atomically); returns the location as a string."""
    return write_atomic(location, lambda tmp: shutil.copyfile(local_path, tmp), os.path.splitext(local_path)[1])


@contextmanager
def local_copy(location: Location) -> Iterator[str]:
    """A local path holding the file's content: the file itself when local, else a temporary download
    (for libraries that only open paths, such as Keras model loading)."""
    fs, path = resolve(location)
    if is_local(fs):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"not found: {path}")
        yield path
        return
    if not fs.isfile(path):
        raise FileNotFoundError(f"not found: {url(fs, path)}")
    with tempfile.TemporaryDirectory(prefix="aml-download-") as tmp_dir:
        local = os.path.join(tmp_dir, os.path.basename(path))
        fs.get_file(path, local)
        yield local


def sha256(location: Location) -> str:
    digest = hashlib.sha256()
    with open_read(location) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _protocols(fs) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)
