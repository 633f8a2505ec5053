"""A real MLflow tracking server, as a deployment runs one: the full ``mlflow`` of ``.venv-mlflow``
(requirements/mlflow.lock, ``make mlflow-env``) serving with its backend store in a PostgreSQL database of its
own (tests/postgres_server.py) and the artifacts it serves (``mlflow-artifacts:``) under an artifact root
folder; the Airflow side reaches it through a registry connection (``registry_connection``), whose
``promotion_lock`` is that backend store (an advisory lock in PostgreSQL, see hooks/registry_lock.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import postgres_server

from airflow_ml_provider.jobs.backends.local.ports import free_ports
from support import REPO

MLFLOW = REPO / ".venv-mlflow" / "bin" / "mlflow"


def unavailable() -> str | None:
    """Why no tracking server can run here, or None."""
    if not MLFLOW.exists():
        return f"no {MLFLOW}: the full mlflow package is not installed (make mlflow-env)"
    return postgres_server.unavailable()


@contextlib.contextmanager
def tracking_server(artifact_root: Path, log: Path, timeout: float = 300.0, wait: bool = True) -> Iterator[dict]:
    """A started server: ``{"url", "store", "process", "log", "wait"}`` (``store``: its backend store's URL;
    ``wait()``: until it answers /health, where ``wait=False`` left that to the caller, to start other things
    meanwhile). Stopped, its process group, when the block ends."""
    store = postgres_server.shared().database("mlflow")
    artifact_root.mkdir(parents=True, exist_ok=True)
    [port] = free_ports(1)
    argv = [str(MLFLOW), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
            "--backend-store-uri", store, "--artifacts-destination", artifact_root.as_uri()]
    # No job runner (model-judging jobs, unused here): fewer processes, a faster start.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with open(log, "ab") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"mlflow server exited ({process.returncode}):\n{_tail(log)}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(1)
        raise AssertionError(f"mlflow server did not answer within {timeout:.0f} s:\n{_tail(log)}")

    try:
        if wait:
            healthy()
        yield {"url": url, "store": store, "process": process, "log": log, "wait": healthy}
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def registry_connection(server: dict) -> str:
    """The ``ml_registry_default`` connection to ``server`` as Airflow reads it from ``AIRFLOW_CONN_...``: the
    tracking URI (task links go to it, the UI's URL), promotions under an advisory lock in its backend store."""
    return json.dumps({"conn_type": "mlregistry", "host": server["url"], "extra": {"promotion_lock": server["store"]}})


def _tail(log: Path) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log.exists() else ""
