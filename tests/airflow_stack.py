"""A real Airflow 3.3 deployment for tests: api-server, scheduler (LocalExecutor), dag-processor and
triggerer as separate processes, each in its own session (setsid), on a fresh AIRFLOW_HOME, with a
PostgreSQL metadata database of its own (tests/postgres_server.py: a copy of a migrated one), as production
runs Airflow.

Used as a context manager from a fixture::

    with AirflowStack(tmp_path_factory.mktemp("airflow"), dags_folder=REPO / "dags") as stack:
        run_id = stack.trigger_dag("ml_training_pipeline", {"boost_rounds": 5})
        assert stack.wait_for_run("ml_training_pipeline", run_id) == "success"
        stack.restart("triggerer", sig=signal.SIGKILL)   # one component alone

Every request goes through the public REST API (``/api/v2``) with a token from ``/auth/token``
(SimpleAuthManager, user ``admin`` with a generated password, see ``credentials``). Components
are started as ``<venv>/bin/airflow`` with that ``bin`` first on PATH (what ``airflow standalone``
and the LocalExecutor's workers need to find ``airflow`` by name). Each component logs to
``<home>/<component>.log``; the tails are printed when a wait times out.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import postgres_server

from airflow_ml_provider.jobs.backends.local.ports import free_ports

VENV_BIN = Path(sys.executable).parent
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
TERMINAL_RUN_STATES = ("success", "failed")
_HEALTH_KEYS = {"scheduler": "scheduler", "dag-processor": "dag_processor", "triggerer": "triggerer"}


def migrated_database(env: Mapping[str, str]) -> Path:
    """An empty SQLite metadata database as ``airflow db migrate`` makes it for this Airflow version, for the
    ``dag.test()`` runs of the pytest workers (one process each, no deployment): made once per machine (by
    whichever test process asks first, under a lock) and copied into each worker's home, where migrating
    again cost about 3 CPU s. ``env``: the
    environment to migrate with (its own home and database are replaced by a temporary one)."""
    from airflow import __version__

    cache = Path(tempfile.gettempdir()) / "airflow-ml-provider-tests"
    cache.mkdir(exist_ok=True)
    database = cache / f"airflow-{__version__}.db"
    with open(cache / "migrate.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not database.exists():
            with tempfile.TemporaryDirectory(dir=cache) as home:
                made = Path(home) / "airflow.db"
                migrate = subprocess.run(
                    [str(VENV_BIN / "airflow"), "db", "migrate"],
                    env={**env, "AIRFLOW_HOME": home, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{made}"},
                    capture_output=True, text=True,
                )
                if migrate.returncode:
                    raise RuntimeError(f"airflow db migrate failed:\n{migrate.stdout}\n{migrate.stderr}")
                os.replace(made, database)
    return database


def airflow_env(
    home: Path, dags_folder: Path, ports: list[int], database: str, extra: Mapping[str, str] | None = None,
    venv_bin: Path = VENV_BIN,
) -> dict:
    """The environment of every component: this one's, minus any Airflow settings, connections or
    variables of the calling process (tests set their own), plus a self-contained configuration.
    ``database``: the metadata database's URL (``postgresql+psycopg://``).
    ``ports``: the API server's, the worker log server's and the triggerer log server's (two stacks may
    run at once), from one ``free_ports`` call, which keeps them distinct."""
    port, worker_log_port, trigger_log_port = ports
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_")) and k != "AIRFLOW_HOME"
    }
    base_url, dags_folder = f"http://127.0.0.1:{port}", Path(dags_folder).resolve()
    bundles = [
        {
            "name": "dags-folder",
            "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
            "kwargs": {"path": str(dags_folder)},
        }
    ]
    env.update(
        {
            "PATH": f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",
            "AIRFLOW_HOME": str(home),
            **postgres_server.airflow_settings(database),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            # Airflow loads a provider's plugins (this provider's training view and refusal words) only then
            "AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": "False",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base_url}/execution/",
            "AIRFLOW__API__BASE_URL": base_url,
            "AIRFLOW__API__WORKERS": "1",
            # A task's first call to the API server (PATCH .../run) is not retried: its 5 s default failed tasks
            # before they ran on a loaded 2-core machine, with eight runs triggered at once.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__CORE__INTERNAL_API_SECRET_KEY": secrets.token_urlsafe(32),
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(worker_log_port),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger_log_port),
            # A file is parsed when it appears and again when it changes (file_parsing_sort_mode modified_time);
            # the tests' files change no other way, and parsing all of them again every 30 s (the default) cost
            # a deployment's dag-processor 2 of its 3.6 CPU s a minute while idle.
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
        }
    )
    env.update(extra or {})
    return env


class AirflowStack:
    """Four Airflow components as separate processes; see the module docstring.

    Args:
        home: an empty directory, the deployment's AIRFLOW_HOME.
        dags_folder: the DAG files to serve (one local DAG bundle).
        env: extra environment for every component (``AIRFLOW__...`` settings, ``AIRFLOW_CONN_...``).
        start_timeout: seconds to wait for every component to report healthy.
        venv_bin: the ``bin`` of the environment whose ``airflow`` runs (default: this process's; a wheel's venv).
        database: the URL of an already migrated metadata database (default: a copy of this process's
            PostgreSQL server's template, migrated by this process's Airflow).
    """

    def __init__(
        self,
        home: Path,
        dags_folder: Path,
        env: Mapping[str, str] | None = None,
        start_timeout: float = 240.0,
        venv_bin: Path = VENV_BIN,
        database: str | None = None,
    ):
        self.home = Path(home)
        ports = free_ports(3)  # chosen below the kernel's ephemeral range, as the local launcher's ranks' are
        self.port = ports[0]
        self.url = f"http://127.0.0.1:{self.port}"
        self.venv_bin = Path(venv_bin)
        # a migrated database of its own, on this test process's server (the test skips without one)
        self.database = database or postgres_server.shared().airflow_database(os.environ)
        self.env = airflow_env(self.home, Path(dags_folder), ports, self.database, env, self.venv_bin)
        self.start_timeout = start_timeout
        self.credentials = ("admin", secrets.token_urlsafe(12))
        self.processes: dict[str, subprocess.Popen] = {}
        self._log_start: dict[str, int] = {}  # where each running component's lines begin in its log
        self._token: str | None = None

    # --- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> AirflowStack:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "passwords.json").write_text(json.dumps(dict([self.credentials])))
        try:
            for component in COMPONENTS:
                self.start_component(component)
            self.wait_until_healthy(COMPONENTS)
        except BaseException:
            self.stop()
            raise

    def start_component(self, component: str) -> subprocess.Popen:
        argv = [str(self.venv_bin / "airflow"), component]
        if component == "api-server":
            argv += ["--host", "127.0.0.1", "--port", str(self.port)]
        log = open(self.home / f"{component}.log", "ab")  # noqa: SIM115 (owned by the process)
        self._log_start[component] = log.tell()
        process = subprocess.Popen(
            argv, env=self.env, cwd=self.home, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self.processes[component] = process
        return process

    def stop_component(self, component: str, sig: int = signal.SIGTERM, grace: float = 30.0) -> None:
        """Signal the component's whole session (its workers too); SIGKILL what outlives ``grace``."""
        process = self.processes.pop(component, None)
        if process is None or process.poll() is not None:
            return
        _signal_group(process.pid, sig)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        if sig != signal.SIGKILL:
            _signal_group(process.pid, signal.SIGKILL)  # leftovers of the group, if any

    def restart(self, component: str, sig: int = signal.SIGTERM, wait_healthy: bool = True) -> None:
        """Stop one component with ``sig`` (e.g. SIGKILL: a crash) and start it again."""
        self.stop_component(component, sig)
        self.start_component(component)
        if wait_healthy:
            self.wait_until_healthy([component], after=time.time())

    def stop(self) -> None:
        for component in reversed(list(self.processes)):
            self.stop_component(component)

    # --- REST API ----------------------------------------------------------------------------------
    def token(self) -> str:
        if self._token is None:
            username, password = self.credentials
            body = self._request("POST", "/auth/token", {"username": username, "password": password})
            self._token = body["access_token"]
        return self._token

    def api(self, method: str, path: str, body: Any = None, query: Mapping[str, Any] | None = None) -> Any:
        """Call ``/api/v2{path}``; returns the decoded JSON body. Raises ``ApiError`` on 4xx/5xx."""
        if query:
            path = f"{path}?{urllib.parse.urlencode(query)}"
        return self._request(method, f"/api/v2{path}", body, {"Authorization": f"Bearer {self.token()}"})

    def _request(self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json", **(headers or {})},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, exc.read().decode(errors="replace")) from None
        return json.loads(text) if text else None

    def health(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=10) as response:
                return json.loads(response.read())
        except (OSError, ValueError):
            return None

    def wait_until_healthy(self, components, after: float = 0.0) -> None:
        """Wait until the api-server answers and each other component's heartbeat is fresh (newer
        than ``after``, a Unix time, when a component was just restarted)."""

        def healthy() -> bool:
            status = self.health()
            if status is None:
                return False
            for component in components:
                if component == "api-server":
                    continue
                entry = status.get(_HEALTH_KEYS[component]) or {}
                beat = entry.get(f"latest_{_HEALTH_KEYS[component]}_heartbeat")
                if entry.get("status") != "healthy" or not beat or _epoch(beat) < after:
                    return False
            return True

        self.wait(healthy, self.start_timeout, f"healthy {', '.join(components)}")

    def wait_for_dag(self, dag_id: str, timeout: float = 180.0) -> dict[str, Any]:
        """The DAG as the API serves it, once the dag-processor has parsed it."""

        def parsed():
            try:
                dag = self.api("GET", f"/dags/{dag_id}")
                self.api("GET", f"/dags/{dag_id}/details")
                return dag
            except ApiError as exc:
                if exc.status != 404:
                    raise
                return None

        return self.wait(parsed, timeout, f"DAG {dag_id} to be parsed")

    def trigger_dag(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        """Trigger a manual run; returns its run_id. The run's id is chosen here, so that a POST the API
        server failed with a 5xx is sent again (``wait``) without starting a second run: a 409 says that the
        first one made it (the API server of a loaded 2-core machine can answer late, or with a 5xx)."""
        run_id = f"manual__{datetime.now(timezone.utc).isoformat()}"
        body = {"dag_run_id": run_id, "logical_date": None, "conf": dict(conf or {})}

        def posted() -> str:
            try:
                return self.api("POST", f"/dags/{dag_id}/dagRuns", body)["dag_run_id"]
            except ApiError as exc:
                if exc.status == 409:  # an earlier try of this very POST created the run
                    return run_id
                raise

        return self.wait(posted, 180, f"a run of {dag_id} to be created")

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.api("GET", f"/dags/{dag_id}/dagRuns/{_quote(run_id)}")["state"]

    def wait_for_run(
        self, dag_id: str, run_id: str, timeout: float = 600.0, states=TERMINAL_RUN_STATES
    ) -> str:
        """Wait until the run reaches one of ``states``; returns the state."""

        def reached():
            state = self.run_state(dag_id, run_id)
            return state if state in states else None

        return self.wait(reached, timeout, f"run {dag_id}/{run_id} to reach {states}")

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        body = self.api("GET", f"/dags/{dag_id}/dagRuns/{_quote(run_id)}/taskInstances", query={"limit": 100})
        return body["task_instances"]

    def task_log(
        self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1
    ) -> list[dict[str, Any]]:
        """The task's log as structured entries (``{"event", "level", "logger", "timestamp", ...}``)."""
        path = f"/dags/{dag_id}/dagRuns/{_quote(run_id)}/taskInstances/{task_id}/logs/{try_number}"
        body = self.api("GET", path, query={"map_index": map_index, "full_content": "true"})
        content = body["content"]
        return [entry if isinstance(entry, dict) else {"event": str(entry)} for entry in content]

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1):
        path = f"/dags/{dag_id}/dagRuns/{_quote(run_id)}/taskInstances/{task_id}/xcomEntries/{key}"
        return self.api("GET", path, query={"map_index": map_index, "deserialize": "true"})["value"]

    def worker_exit_processed(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> bool:
        """Whether the scheduler has processed the executor's report that a worker of this try exited (its
        log: no REST resource says so). Airflow 3.3.2 fails a deferred try whose trigger fires before that
        report of the deferring worker's exit is processed (apache/airflow#71580, #72716: the stale success
        removes the resumed workload from the executor); a test that answers a deferral at once waits for it."""
        key = (f"Received executor event with state success for task instance TaskInstanceKey(dag_id={dag_id!r}, "
               f"task_id={task_id!r}, run_id={run_id!r}, try_number={try_number}")
        return key in (self.home / "scheduler.log").read_text(errors="replace")

    # --- diagnostics -------------------------------------------------------------------------------
    def log_tails(self, lines: int = 40) -> str:
        parts = []
        for component in COMPONENTS:
            path = self.home / f"{component}.log"
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {component} ({path}) ---\n" + "\n".join(tail))
        return "\n".join(parts)

    def wait(self, predicate, timeout: float, what: str):
        """Poll ``predicate`` until it is truthy and return its value; fail naming ``what``, with the
        components' log tails. A component that died fails the wait at once. A REST call that times out
        or meets a server error (5xx: the API server of a loaded 2-core machine) is polled again; a 4xx is
        the test's own mistake and raises."""
        deadline, error = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            for component, process in list(self.processes.items()):
                if process.poll() is not None:
                    raise RuntimeError(f"{component} exited ({process.returncode})\n{self.log_tails()}")
            try:
                if value := predicate():
                    return value
            except (OSError, ApiError) as exc:
                if isinstance(exc, ApiError) and exc.status < 500:
                    raise
                error = exc
            time.sleep(1)
        raise AssertionError(
            f"timed out after {timeout:.0f} s waiting for {what} (last error: {error})\n{self.log_tails()}"
        )


class ApiError(Exception):
    def __init__(self, status: int, body: str):
        super().__init__(f"HTTP {status}: {body[:2000]}")
        self.status, self.body = status, body


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # the component's session leader: its pgid is its pid
    except ProcessLookupError:
        pass


def _quote(run_id: str) -> str:
    return urllib.parse.quote(run_id, safe="")


def _epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
