"""Locks for what MLflow does not make atomic: creating its SQL store, and moving ``champion`` after
checking which version holds it. MLflow has no compare-and-set on an alias, so every promotion of one
model name runs under one lock that all the deployment's task processes (and machines) share:

- a SQLite store (the embedded default): an ``fcntl`` lock on a file beside the database
  (``<db>.locks/``), which every process that opens that database can reach;
- a PostgreSQL or MySQL store: an advisory lock in that database (``pg_advisory_lock``, ``GET_LOCK``),
  held by a connection of its own, so the database drops it if the task dies;
- a tracking server (``http(s)://``, ``databricks``): the connection's ``promotion_lock``, a database URL
  (PostgreSQL, MySQL: e.g. the server's backend store) or a folder on storage every worker mounts;
  without one, a lock file under ``$AIRFLOW_HOME/ml/locks``, which serializes this machine's tasks only.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SQL_LOCKS = ("postgresql", "mysql")  # the URI schemes (before any +driver) with an advisory lock here


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created 0600, never through a link) for the block: other
    processes and threads wait; the kernel releases it when the holder dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def sql_lock(uri: str, key: str) -> Iterator[None]:
    """A session advisory lock named ``key`` in the PostgreSQL or MySQL database at ``uri``."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(uri, poolclass=sqlalchemy.pool.NullPool)
    digest = hashlib.sha256(key.encode()).digest()
    if engine.dialect.name == "postgresql":
        take, release = "SELECT pg_advisory_lock(:key)", "SELECT pg_advisory_unlock(:key)"
        value: int | str = int.from_bytes(digest[:8], "big", signed=True)
    else:
        take, release = "SELECT GET_LOCK(:key, -1)", "SELECT RELEASE_LOCK(:key)"
        value = f"airflow-ml-{digest.hex()[:40]}"  # MySQL lock names: at most 64 characters
    try:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text(take), {"key": value})
            try:
                yield
            finally:
                connection.execute(sqlalchemy.text(release), {"key": value})
    finally:
        engine.dispose()


def sqlite_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI; None for any other store (and an in-memory one)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///"):].split("?", 1)[0]
    return Path(path).resolve() if path and path != ":memory:" else None


def scheme(uri: str) -> str:
    """``postgresql`` for ``postgresql+psycopg2://...``: the database kind of a URI."""
    return uri.split("://", 1)[0].split("+", 1)[0] if "://" in uri else ""


@contextmanager
def store_created(uri: str) -> Iterator[None]:
    """Held while a SQLite store is created or checked: MLflow migrates a fresh store without a lock, and
    two processes doing it at once both fail (``Online migration expected to match one row``)."""
    path = sqlite_file(uri)
    if path is None:
        yield
        return
    with file_lock(path.with_name(f"{path.name}.locks") / "create.lock"):
        yield


@contextmanager
def promotion_lock(registry_uri: str, configured: str | None, name: str, home: Path) -> Iterator[str]:
    """Serializes the promotions of model ``name`` (see the module's docstring); yields which lock it holds,
    for the task log. ``configured``: the connection's ``promotion_lock``; ``home``: the machine-local
    fallback's folder."""
    key = f"promote:{name}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    target = configured or registry_uri
    if scheme(target) in SQL_LOCKS:
        with sql_lock(target, key):
            yield f"an advisory lock in the {scheme(target)} database"
        return
    if configured and not os.path.isabs(configured):
        raise ValueError(f"promotion_lock: {configured!r} is neither a PostgreSQL/MySQL URL nor an absolute path")
    database = None if configured else sqlite_file(registry_uri)
    folder = Path(configured) if configured else database.with_name(f"{database.name}.locks") if database else home
    with file_lock(folder / f"promote-{digest}.lock"):
        yield f"the lock file {folder}/promote-{digest}.lock" + (
            "" if configured or database else " (this machine only: set the registry connection's promotion_lock)")
