"""Champion promotion through a real MLflow tracking server whose backend store is PostgreSQL (issue 40): the
registry connection's ``promotion_lock`` is that store, so the compare-and-set of two processes runs under a
PostgreSQL advisory lock (hooks/registry_lock.py), which these tests watch in ``pg_locks``: another process's
promotion waits for it and then sees the champion that moved meanwhile; the database drops the lock of a
holder that is killed; another model's promotion does not wait."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import postgres_server
import pytest
import tracking_server

from support import REPO

pytestmark = [pytest.mark.integration, pytest.mark.skipif(tracking_server.unavailable() is not None,
                                                          reason=str(tracking_server.unavailable()))]

# One process's promotion: its "ready" before it asks for the lock, its outcome after.
PROMOTE = """
import sys
from airflow_ml_provider.hooks.model_registry import ModelRegistryHook
print("ready", flush=True)
done = ModelRegistryHook().promote(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
print(done.moved, done.previous, done.lock, flush=True)
"""
# A process that takes the lock and holds it until it is killed.
HOLD = """
import sys, time
from pathlib import Path
from airflow_ml_provider.hooks.registry_lock import promotion_lock
with promotion_lock(sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])):
    print("holding", flush=True)
    time.sleep(600)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("tracking")
    with tracking_server.tracking_server(root / "mlartifacts", root / "mlflow-server.log") as started:
        yield started


@pytest.fixture
def env(server, monkeypatch) -> dict[str, str]:
    """This process's and the promoting processes' environment: the registry connection to the server."""
    monkeypatch.setenv("AIRFLOW_CONN_ML_REGISTRY_DEFAULT", tracking_server.registry_connection(server))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def _model(server, versions: int) -> str:
    """A registered model with ``versions`` versions (each of a run's logged artifact), version 1 champion."""
    from mlflow import MlflowClient

    client, name = MlflowClient(server["url"], server["url"]), f"promotion_pg_{uuid.uuid4().hex[:8]}"
    experiment = client.create_experiment(name)
    client.create_registered_model(name)
    for _ in range(versions):
        run = client.create_run(experiment)
        client.log_text(run.info.run_id, "a model", "model/MLmodel")
        client.create_model_version(name, f"{run.info.artifact_uri}/model", run.info.run_id)
    client.set_registered_model_alias(name, "champion", "1")
    return name


def _advisory_locks(server, granted: bool) -> int:
    """The advisory locks held (or waited for) in the server's backend store's database."""
    import psycopg

    database = postgres_server.PostgresServer.name(server["store"])
    with psycopg.connect(host=str(postgres_server.shared().root), user=postgres_server.USER, dbname=database) as c:
        return c.execute("SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                         "WHERE l.locktype = 'advisory' AND l.granted = %s AND d.datname = %s",
                         (granted, database)).fetchone()[0]


def _until(predicate, timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _start(code: str, *argv: str, env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *argv], env=env, stdout=subprocess.PIPE, text=True)


def test_a_promotion_waits_for_the_advisory_lock_and_sees_the_champion_that_moved(server, env):
    from airflow_ml_provider.hooks.model_registry import CHAMPION, ModelRegistryHook
    from airflow_ml_provider.hooks.registry_lock import promotion_lock

    name = _model(server, 3)
    registry = ModelRegistryHook()
    settings = registry.settings()
    assert settings.promotion_lock == server["store"] and settings.ui_url == server["url"]
    with promotion_lock(settings.registry_uri, settings.promotion_lock, name, REPO) as held:
        assert held == "an advisory lock in the postgresql database"
        assert _advisory_locks(server, granted=True) == 1
        other = _start(PROMOTE, name, "3", "1", env=env)  # the champion its gate saw: version 1
        assert other.stdout.readline().strip() == "ready"
        _until(lambda: _advisory_locks(server, granted=False) == 1, what="the other promotion to wait for the lock")
        assert other.poll() is None
        registry.set_alias(name, CHAMPION, 2)  # another run's promotion, inside the lock
    out, _ = other.communicate(timeout=120)
    assert out.split()[:2] == ["False", "2"], out  # not moved: version 2 became champion meanwhile
    assert registry.alias_version(name, CHAMPION)["version"] == 2
    assert _advisory_locks(server, granted=True) == 0


def test_a_killed_holders_lock_is_dropped_by_the_database(server, env, tmp_path):
    from airflow_ml_provider.hooks.model_registry import CHAMPION, ModelRegistryHook

    name = _model(server, 2)
    holder = _start(HOLD, server["url"], server["store"], name, str(tmp_path), env=env)
    assert holder.stdout.readline().strip() == "holding"
    other = _start(PROMOTE, name, "2", "1", env=env)
    assert other.stdout.readline().strip() == "ready"
    _until(lambda: _advisory_locks(server, granted=False) == 1, what="the promotion to wait for the holder")
    holder.send_signal(signal.SIGKILL)  # a task that dies holding the lock
    holder.wait(timeout=30)
    out, _ = other.communicate(timeout=120)
    assert out.split()[:2] == ["True", "1"], out
    assert ModelRegistryHook().alias_version(name, CHAMPION)["version"] == 2


def test_another_models_promotion_does_not_wait(server, env, tmp_path):
    held, free = _model(server, 1), _model(server, 2)
    holder = _start(HOLD, server["url"], server["store"], held, str(tmp_path), env=env)
    try:
        assert holder.stdout.readline().strip() == "holding"
        out, _ = _start(PROMOTE, free, "2", "1", env=env).communicate(timeout=120)
        assert out.split()[1:3] == ["True", "1"], out
    finally:
        holder.kill()
        holder.wait(timeout=30)
