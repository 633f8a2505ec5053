#!/usr/bin/env python3
"""Get the Kubernetes CRDs pinned in requirements/crds.lock into the cache, verified by sha256.

Run by `make crds` (and so by `make test`, before pytest). Each lock row names an upstream file
(repo, ref, path) and its sha256. Where a file comes from, first that applies:
  1. a local mirror: $AIRFLOW_ML_CRDS_DIR, else a `shared/crds` folder beside the clone where one
     exists (a flat folder laid out by the lock's `file` column, next/ included); a file the mirror
     holds is read and verified on every run, so a wrong mirror is always reported;
  2. the cache, when it already holds a verified copy;
  3. for a file the mirror does not hold (a row newer than the mirror, e.g. a small runtime manifest),
     the package's committed copy (below), verified the same way: a mirror stands for no network;
  4. $AIRFLOW_ML_CRDS_BASE_URL/<repo>/<ref>/<path> (default https://raw.githubusercontent.com).
Verified files are kept in <cache>/crds/<repo>/<ref>/<path> (<cache>: $AIRFLOW_ML_CACHE, else
~/.cache/airflow-ml-provider, beside the kube-apiserver build); the tests read them through the
symlinks in .tools/crds/<file>. A file that cannot be had or whose digest differs stops the run with
one message naming the file and the variable to fix; nothing unverified is ever cached.
With --package it also writes the package's copy that `airflow-ml check` validates CRD instances against
(airflow_ml_provider/jobs/backends/kubernetes/crds/: each file gzip-compressed, the lock beside them).
Standard library only: it runs before any environment exists.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements" / "crds.lock"
DEST = REPO / ".tools" / "crds"
PACKAGE = REPO / "airflow_ml_provider" / "jobs" / "backends" / "kubernetes" / "crds"
DEFAULT_BASE_URL = "https://raw.githubusercontent.com"
MIRROR_VAR, BASE_URL_VAR = "AIRFLOW_ML_CRDS_DIR", "AIRFLOW_ML_CRDS_BASE_URL"


class CrdError(RuntimeError):
    """A CRD that cannot be had as pinned: the message names the file and what to change."""


@dataclass(frozen=True)
class Pin:
    file: str  # the name the tests read (next/... for the coming backends)
    repo: str
    ref: str
    path: str
    sha256: str

    def cached(self, cache: Path) -> Path:
        return cache / "crds" / self.repo / self.ref / self.path


def read_lock(lock: Path = LOCK) -> list[Pin]:
    """The rows of the lock's table (`| file | repo | ref | path | sha256 |`)."""
    pins = []
    for line in lock.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or cells[0] in ("file", "") or set(cells[0]) <= {"-"}:
            continue
        if len(cells) != 5:
            raise CrdError(f"{lock}: a row needs file, repo, ref, path and sha256: {line.strip()!r}")
        pin = Pin(*cells)
        if Path(pin.file).is_absolute() or ".." in Path(pin.file).parts or len(pin.sha256) != 64:
            raise CrdError(f"{lock}: malformed row for {pin.file!r}")
        pins.append(pin)
    return pins


def cache_root() -> Path:
    configured = os.environ.get("AIRFLOW_ML_CACHE")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "airflow-ml-provider"


def default_mirror() -> Path | None:
    """$AIRFLOW_ML_CRDS_DIR, else the workplace's shared/crds beside the clone where it exists."""
    configured = os.environ.get(MIRROR_VAR)
    if configured:
        return Path(configured)
    beside = REPO.parent / "shared" / "crds"
    return beside if beside.is_dir() else None


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _verified(pin: Pin, data: bytes, source: str, remedy: str) -> bytes:
    """``data`` if it is the pinned file; else CrdError naming where it came from and what to do."""
    if _digest(data) != pin.sha256:
        raise CrdError(f"CRD {pin.file}: {source} has sha256 {_digest(data)}, requirements/crds.lock pins "
                       f"{pin.sha256} ({pin.repo}@{pin.ref}:{pin.path}); {remedy}")
    return data


def _from_mirror(pin: Pin, mirror: Path) -> bytes:
    source = mirror / pin.file
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise CrdError(f"CRD {pin.file}: cannot read {source} ({exc.strerror}); {MIRROR_VAR} names the "
                       f"local mirror ({mirror}): fix it, or unset it to download from {BASE_URL_VAR}") from None
    return _verified(pin, data, str(source), f"the local mirror ({MIRROR_VAR}={mirror}) is not the pinned file: "
                     f"restore it, or unset {MIRROR_VAR} to download it")


def _download(pin: Pin, base_url: str, timeout_s: float) -> bytes:
    url = f"{base_url.rstrip('/')}/{pin.repo}/{pin.ref}/{pin.path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            data = response.read()
    except (urllib.error.URLError, OSError) as exc:
        raise CrdError(f"CRD {pin.file}: download of {url} failed ({getattr(exc, 'reason', exc)}); set "
                       f"{MIRROR_VAR} to a folder holding the lock's files, or {BASE_URL_VAR} to a reachable "
                       f"mirror of raw.githubusercontent.com") from None
    return _verified(pin, data, url, f"refusing it ({BASE_URL_VAR}={base_url})")


def _store(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as tmp:
        tmp.write(data)
    os.replace(tmp.name, path)


def _from_package(pin: Pin, mirror: Path) -> bytes:
    """The package's committed copy of ``pin`` (``package`` wrote it from a verified file), for a file the local
    mirror does not hold."""
    import gzip

    packed = PACKAGE / f"{pin.file}.gz"
    try:
        data = gzip.decompress(packed.read_bytes())
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise CrdError(f"CRD {pin.file}: the local mirror ({MIRROR_VAR}={mirror}) does not hold it and the "
                       f"package's copy {packed} cannot be read ({exc}); add it to the mirror, or unset "
                       f"{MIRROR_VAR} to download it") from None
    return _verified(pin, data, f"the package's copy {packed}", f"the local mirror ({MIRROR_VAR}={mirror}) does not "
                     f"hold it: add it to the mirror, or unset {MIRROR_VAR} to download it")


def fetch(pins: list[Pin], cache: Path, mirror: Path | None, base_url: str, timeout_s: float = 60) -> dict[str, str]:
    """Make every pinned file present and verified in the cache; returns {file: where it came from}."""
    origins = {}
    for pin in pins:
        target = pin.cached(cache)
        if mirror is not None and (mirror / pin.file).exists():
            data, origins[pin.file] = _from_mirror(pin, mirror), "mirror"
        elif target.is_file() and _digest(target.read_bytes()) == pin.sha256:
            origins[pin.file] = "cache"
            continue
        elif mirror is not None:
            data, origins[pin.file] = _from_package(pin, mirror), "package"
        else:
            data, origins[pin.file] = _download(pin, base_url, timeout_s), "download"
        if not (target.is_file() and target.read_bytes() == data):
            _store(target, data)
    return origins


def link(pins: list[Pin], cache: Path, dest: Path) -> None:
    """dest/<file> -> the verified cached copy (what tests/kube_cluster.py reads)."""
    shutil.rmtree(dest, ignore_errors=True)
    for pin in pins:
        (dest / pin.file).parent.mkdir(parents=True, exist_ok=True)
        (dest / pin.file).symlink_to(pin.cached(cache))


def package(pins: list[Pin], cache: Path, lock: Path, dest: Path = PACKAGE) -> None:
    """The package's copy (airflow_ml_provider/jobs/backends/kubernetes/schemas.py reads it): every verified file
    as <file>.gz (no timestamp, so the bytes depend on the file alone) and the lock they were verified against."""
    import gzip

    for old in dest.rglob("*.gz"):
        old.unlink()
    written = {dest / f"{pin.file}.gz": gzip.compress(pin.cached(cache).read_bytes(), compresslevel=9, mtime=0)
               for pin in pins}
    written[dest / "crds.lock"] = lock.read_bytes()
    for path, data in written.items():
        _store(path, data)
        path.chmod(0o644)  # package data, read by whoever runs the check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lock", type=Path, default=LOCK)
    parser.add_argument("--dest", type=Path, default=DEST, help="folder of links the tests read")
    parser.add_argument("--no-mirror", action="store_true", help=f"ignore {MIRROR_VAR} and shared/crds")
    parser.add_argument("--package", action="store_true", help=f"also write the package's copy ({PACKAGE})")
    args = parser.parse_args(argv)
    cache = cache_root()
    mirror = None if args.no_mirror else default_mirror()
    base_url = os.environ.get(BASE_URL_VAR) or DEFAULT_BASE_URL
    try:
        pins = read_lock(args.lock)
        origins = fetch(pins, cache, mirror, base_url)
    except CrdError as exc:
        print(f"fetch_crds: {exc}", file=sys.stderr)
        return 1
    link(pins, cache, args.dest)
    if args.package:
        package(pins, cache, args.lock)
    counts = {origin: sum(1 for o in origins.values() if o == origin) for origin in sorted(set(origins.values()))}
    source = f"mirror {mirror}" if mirror is not None else f"cache / {base_url}"
    print(f"fetch_crds: {len(pins)} CRDs verified in {cache / 'crds'} ({source}: {counts})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
