"""A throwaway PostgreSQL server for the test deployments, as production runs Airflow: Debian's postgresql
(``make test`` installs it: scripts/install_postgres.sh), a cluster made with ``initdb`` in a temporary folder,
listening on a unix socket in that folder only (no TCP port to collide on), run as the ``postgres`` user when
the tests run as root (the server refuses root), else as the tests' own user.

One server per test process (each pytest-xdist worker has its own), started when a test first asks for a
database (``shared().database(...)``) and stopped when the process's session ends (tests/conftest.py) or the
process exits; it is its parent's child to the end (PR_SET_PDEATHSIG), so a killed worker leaves none running.
Every deployment gets a database of its own: Airflow's is copied from a template migrated once per server
(``airflow_database``), so that no deployment waits for ``airflow db migrate``.

The cluster is made for speed, not durability (fsync off): nothing in it outlives the test run."""

from __future__ import annotations

import atexit
import ctypes
import glob
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

USER = "airflow"  # the cluster's superuser (initdb -U), trusted on the socket
_PR_SET_PDEATHSIG = 1


def bin_dir() -> Path | None:
    """Debian's newest installed server (``/usr/lib/postgresql/<major>/bin``), None when there is none."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def _die_with_parent() -> None:
    """In the server's child between fork and exec (after its user is set): SIGQUIT, the server's immediate
    shutdown, when the test process that started it dies."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGQUIT)


class PostgresServer:
    """A cluster in a folder of its own; ``url(database)`` is the SQLAlchemy URL of one of its databases."""

    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="pg-", dir="/tmp"))  # short: a socket path is at most 107 bytes
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.process: subprocess.Popen | None = None
        self._names = itertools.count(1)
        self._lock = threading.Lock()
        (self.root / "owner").write_text(str(os.getpid()))  # for _remove_abandoned
        self._template: str | None = None
        owner = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        self._user = {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []} if owner else {}
        if owner:
            os.chown(self.root, owner.pw_uid, owner.pw_gid)

    def start(self, timeout: float = 120.0) -> PostgresServer:
        started = time.monotonic()
        subprocess.run(
            [str(self.bindir / "initdb"), "-D", str(self.data), "-U", USER, "--auth=trust", "-E", "UTF8",
             "--no-locale", "--no-sync", "--no-instructions"],
            check=True, capture_output=True, cwd=self.root, **self._user,
        )
        settings = {
            "listen_addresses": "",  # the socket alone
            "unix_socket_directories": str(self.root),
            "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
            "max_connections": "400",  # the deployments of one worker: each component's pool, MLflow's, the locks'
            "shared_buffers": "32MB",
            "log_min_messages": "warning",
        }
        argv = [str(self.bindir / "postgres"), "-D", str(self.data)]
        argv += [arg for name, value in settings.items() for arg in ("-c", f"{name}={value}")]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                argv, cwd=self.root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_die_with_parent, **self._user,
            )
        ready = [str(self.bindir / "pg_isready"), "-q", "-h", str(self.root), "-U", USER, "-d", "postgres"]
        while subprocess.run(ready).returncode != 0:
            if self.process.poll() is not None or time.monotonic() - started > timeout:
                self.stop()
                raise RuntimeError(f"PostgreSQL did not start:\n{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        return self

    def url(self, database: str, driver: str = "psycopg") -> str:
        return f"postgresql+{driver}://{USER}@/{database}?host={self.root}"

    @staticmethod
    def name(url: str) -> str:
        """The database a URL of ``url()`` names."""
        return url.split("://", 1)[1].split("/", 1)[1].split("?", 1)[0]

    def execute(self, statement: str, database: str = "postgres") -> None:
        """A statement outside a transaction (CREATE DATABASE cannot run in one), through psycopg."""
        import psycopg

        with psycopg.connect(host=str(self.root), user=USER, dbname=database, autocommit=True) as connection:
            connection.execute(statement)

    def database(self, prefix: str, template: str | None = None) -> str:
        """A new empty database (or a copy of ``template``); returns its URL."""
        return self.url(self._create(prefix, template))

    def _create(self, prefix: str, template: str | None = None) -> str:
        name = f"{prefix}_{next(self._names)}"
        self.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        return name

    def airflow_database(self, env: Mapping[str, str]) -> str:
        """A new database holding Airflow's migrated schema: a copy of this server's template, which the
        first call migrates with ``airflow db migrate`` (``env``: the environment to migrate with)."""
        with self._lock:
            if self._template is None:
                name = self._create("airflow_template")
                url = self.url(name)
                with tempfile.TemporaryDirectory() as home:
                    migrate = subprocess.run(
                        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                        env={**env, "AIRFLOW_HOME": home, **airflow_settings(url)},
                        capture_output=True, text=True,
                    )
                if migrate.returncode:
                    raise RuntimeError(f"airflow db migrate failed:\n{migrate.stdout}\n{migrate.stderr}")
                self._template = name
            return self.database("airflow", template=self._template)

    def stop(self) -> None:
        """SIGINT (the server's fast shutdown: clients disconnected), SIGQUIT if it outlives 30 s; the
        folder removed."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)


def airflow_settings(url: str) -> dict[str, str]:
    """Airflow's metadata database at ``url`` (a ``postgresql+psycopg://`` one), in environment variables: the
    async engine through psycopg too (Airflow would derive an asyncpg URL, a second driver)."""
    return {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": url.replace("+psycopg://", "+psycopg_async://", 1)}


_shared: PostgresServer | None = None


def unavailable() -> str | None:
    """Why there is no server to start here, or None."""
    if bin_dir() is None:
        return "no PostgreSQL server installed (scripts/install_postgres.sh, which make test runs)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and no postgres user to run the server as"
    return None


def _remove_abandoned() -> None:
    """The folders of servers whose test process died without removing them (killed: its server died with
    it, the folder stayed)."""
    for owner in Path("/tmp").glob("pg-*/owner"):
        try:
            os.kill(int(owner.read_text()), 0)
        except ProcessLookupError:
            shutil.rmtree(owner.parent, ignore_errors=True)
        except (OSError, ValueError):
            continue


def shared() -> PostgresServer:
    """This process's server, started on first use; a test skips where none can be started."""
    global _shared
    if _shared is None:
        if (reason := unavailable()) is not None:
            pytest.skip(reason)
        _remove_abandoned()
        _shared = PostgresServer(bin_dir()).start()
        atexit.register(stop_shared)
    return _shared


def stop_shared() -> None:
    global _shared
    if _shared is not None:
        server, _shared = _shared, None
        server.stop()
