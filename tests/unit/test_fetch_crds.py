"""`make crds` (scripts/fetch_crds.py) downloads the pinned CRDs from a base URL and verifies them; a
tampered file, from a server or a local mirror, stops it with one message naming the file and the
variable. The server here is a real loopback HTTP server serving raw.githubusercontent.com's layout
(<repo>/<ref>/<path>), filled from the verified cache `make crds` left for the Kubernetes tests."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from kube_cluster import CRDS_DIR

from support import REPO

SCRIPT = REPO / "scripts" / "fetch_crds.py"
_spec = importlib.util.spec_from_file_location("fetch_crds", SCRIPT)
fetch_crds = sys.modules["fetch_crds"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fetch_crds)
PINS = fetch_crds.read_lock()
TAMPERED = "batch.volcano.sh_jobs.yaml"


@pytest.fixture
def upstream(tmp_path):
    """A copy of the pinned files in the upstream layout; returns (root, requested paths, base URL)."""
    if not all((CRDS_DIR / pin.file).is_file() for pin in PINS):
        pytest.skip(f"no verified CRDs in {CRDS_DIR}: run `make crds`")
    root = tmp_path / "upstream"
    for pin in PINS:
        target = root / pin.repo / pin.ref / pin.path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CRDS_DIR / pin.file, target)
    requested = []

    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self):
            requested.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, requested, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _run(tmp_path, *args, **env) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_ML_CRDS")}
    full_env |= {"AIRFLOW_ML_CACHE": str(tmp_path / "cache"), **env}
    return subprocess.run([sys.executable, str(SCRIPT), "--dest", str(tmp_path / "dest"), *args],
                          env=full_env, capture_output=True, text=True, timeout=120)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_downloads_every_pinned_file_from_the_base_url_and_verifies_it(upstream, tmp_path):
    root, requested, base_url = upstream
    done = _run(tmp_path, "--no-mirror", AIRFLOW_ML_CRDS_BASE_URL=base_url)
    assert done.returncode == 0, done.stderr
    assert sorted(requested) == sorted(f"/{p.repo}/{p.ref}/{p.path}" for p in PINS)
    for pin in PINS:
        cached = tmp_path / "cache" / "crds" / pin.repo / pin.ref / pin.path
        assert _digest(cached) == pin.sha256
        assert (tmp_path / "dest" / pin.file).resolve() == cached.resolve()
    # A second run needs no server: the verified cache answers.
    requested.clear()
    again = _run(tmp_path, "--no-mirror", AIRFLOW_ML_CRDS_BASE_URL="http://127.0.0.1:9")
    assert again.returncode == 0, again.stderr
    assert requested == [] and f"'cache': {len(PINS)}" in again.stderr


def test_a_tampered_download_is_refused_naming_the_file_and_variable(upstream, tmp_path):
    root, _, base_url = upstream
    (pin,) = [p for p in PINS if p.file == TAMPERED]
    with (root / pin.repo / pin.ref / pin.path).open("a") as served:
        served.write("# one more line\n")
    done = _run(tmp_path, "--no-mirror", AIRFLOW_ML_CRDS_BASE_URL=base_url)
    assert done.returncode == 1
    (message,) = done.stderr.strip().splitlines()
    assert f"CRD {TAMPERED}:" in message and "AIRFLOW_ML_CRDS_BASE_URL" in message and pin.sha256 in message
    assert not (tmp_path / "cache" / "crds" / pin.repo / pin.ref / pin.path).exists()


def test_an_unreachable_base_url_stops_naming_the_file_and_variables(tmp_path):
    done = _run(tmp_path, "--no-mirror", AIRFLOW_ML_CRDS_BASE_URL="http://127.0.0.1:9")
    assert done.returncode == 1
    (message,) = done.stderr.strip().splitlines()
    assert f"CRD {PINS[0].file}:" in message and "AIRFLOW_ML_CRDS_DIR" in message
    assert "AIRFLOW_ML_CRDS_BASE_URL" in message


def test_a_tampered_local_mirror_is_refused_even_with_a_verified_cache(upstream, tmp_path):
    root, requested, base_url = upstream
    assert _run(tmp_path, "--no-mirror", AIRFLOW_ML_CRDS_BASE_URL=base_url).returncode == 0
    mirror = tmp_path / "mirror"
    for pin in PINS:
        (mirror / pin.file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CRDS_DIR / pin.file, mirror / pin.file)
    assert _run(tmp_path, AIRFLOW_ML_CRDS_DIR=str(mirror)).returncode == 0
    (mirror / TAMPERED).write_bytes((mirror / TAMPERED).read_bytes().replace(b"v1alpha1", b"v1alpha2", 1))
    done = _run(tmp_path, AIRFLOW_ML_CRDS_DIR=str(mirror))
    assert done.returncode == 1
    (message,) = done.stderr.strip().splitlines()
    assert f"CRD {TAMPERED}:" in message and f"AIRFLOW_ML_CRDS_DIR={mirror}" in message


def test_package_writes_what_the_package_ships_from_the_verified_cache(upstream, tmp_path):
    """`--package`'s output is the committed copy (airflow_ml_provider/jobs/backends/kubernetes/crds/) byte for byte:
    the same cache gives the same gzip bytes (no timestamp), and the lock beside them."""
    _, _, base_url = upstream
    cache = tmp_path / "cache"
    assert _run(tmp_path, "--no-mirror", AIRFLOW_ML_CRDS_BASE_URL=base_url).returncode == 0
    dest = tmp_path / "package"
    fetch_crds.package(PINS, cache, fetch_crds.LOCK, dest)
    shipped = REPO / "airflow_ml_provider" / "jobs" / "backends" / "kubernetes" / "crds"
    written = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert written == sorted([*(f"{pin.file}.gz" for pin in PINS), "crds.lock"])
    for name in written:
        assert (dest / name).read_bytes() == (shipped / name).read_bytes(), name


def test_a_file_the_mirror_lacks_comes_from_the_packages_verified_copy(upstream, tmp_path):
    """A row newer than the workplace's mirror (the xgboost-distributed runtime): with no cache and no network, the
    package's committed copy, checked against the lock; a copy that is not the pinned file stops the run naming it."""
    mirror = tmp_path / "mirror"
    lacking = "next/runtimes/xgboost_distributed.yaml"
    for pin in PINS:
        if pin.file != lacking:
            (mirror / pin.file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(CRDS_DIR / pin.file, mirror / pin.file)
    done = _run(tmp_path, AIRFLOW_ML_CRDS_DIR=str(mirror), AIRFLOW_ML_CRDS_BASE_URL="http://127.0.0.1:9")
    assert done.returncode == 0, done.stderr
    assert f"'mirror': {len(PINS) - 1}, 'package': 1" in done.stderr
    (pin,) = [p for p in PINS if p.file == lacking]
    assert _digest(tmp_path / "dest" / lacking) == pin.sha256

    clone = tmp_path / "clone"  # the script in a clone whose package copy was edited
    (clone / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, clone / "scripts")
    shutil.copytree(REPO / "requirements", clone / "requirements")
    packaged = clone / "airflow_ml_provider" / "jobs" / "backends" / "kubernetes" / "crds" / f"{lacking}.gz"
    packaged.parent.mkdir(parents=True)
    packaged.write_bytes(gzip.compress(b"kind: ClusterTrainingRuntime\n"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_ML_CRDS")}
    edited = subprocess.run([sys.executable, str(clone / "scripts" / "fetch_crds.py"), "--dest", str(tmp_path / "d2")],
                            env={**env, "AIRFLOW_ML_CACHE": str(tmp_path / "cache2"), "AIRFLOW_ML_CRDS_DIR": str(mirror)},
                            capture_output=True, text=True, timeout=120)
    assert edited.returncode == 1
    (message,) = edited.stderr.strip().splitlines()
    assert f"CRD {lacking}:" in message and "does not hold it" in message and pin.sha256 in message
