"""`make ui` / `make mlflow-ui`: the Airflow UI (standalone's components) with this project's DAGs on the
embedded defaults, and the MLflow UI over the embedded model registry, so the tasks' MLflow links open.
Both listen on loopback only unless ``--host`` says otherwise, and no log server is started.

Every process runs in its own session (setsid) and is stopped, whole process groups, on Ctrl-C or exit.
Airflow is started with the control environment's ``bin`` first on PATH and ``[ml_training]
mlflow_ui_url`` pointing at the MLflow UI.
The MLflow UI needs the full ``mlflow`` package, which the control environment (mlflow-skinny)
lacks: it runs from ``.venv-mlflow`` (``make mlflow-env``), the same MLflow version, on the same
SQLite registry ``$AIRFLOW_HOME/ml/mlflow.db`` the tasks write.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
MLFLOW = REPO / ".venv-mlflow" / "bin" / "mlflow"


# What ``airflow standalone`` runs, started here so that nothing listens beyond ``--host``: standalone
# gives no way to bind the api-server elsewhere than 0.0.0.0 from its own flags, and its scheduler and
# triggerer start log servers on every interface (8793/8794). Task logs are local files here, which the
# api-server reads itself: the log servers are skipped.
COMPONENTS = (["api-server"], ["scheduler", "--skip-serve-logs"], ["dag-processor"], ["triggerer", "--skip-serve-logs"])
SIMPLE_AUTH = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"


def airflow_env(home: Path, port: int, mlflow_url: str, host: str = "127.0.0.1") -> dict[str, str]:
    """Airflow's settings for the UI: this project's DAGs, no examples, the training environment,
    standalone's executor and auth manager, the api-server on ``host`` only."""
    bundles = [
        {
            "name": "dags-folder",
            "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
            "kwargs": {"path": str(REPO / "dags")},
        }
    ]
    env = dict(os.environ)  # the caller's own AIRFLOW__ settings apply, except these:
    env.update(
        {
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",  # ml_batch_scoring runs on the model's events
            # Airflow loads a provider's plugins (the training view, refusals in the Params' words) only then
            "AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": "False",
            "AIRFLOW__API__HOST": host,
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__AUTH_MANAGER": SIMPLE_AUTH,
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__ML_TRAINING__MLFLOW_UI_URL": mlflow_url,
        }
    )
    if (REPO / ".venv-train" / "bin" / "python").exists():
        env.setdefault("AIRFLOW_ML_LOCAL_IMAGE", str(REPO / ".venv-train"))
    return env


def mlflow_argv(home: Path, port: int, host: str = "127.0.0.1") -> list[str]:
    """The MLflow UI over the embedded registry (the store ``ModelRegistryHook`` uses by default)."""
    ml = home / "ml"
    return [
        str(MLFLOW),
        "server",
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        "1",
        "--backend-store-uri",
        f"sqlite:///{ml / 'mlflow.db'}",
        "--default-artifact-root",
        (ml / "mlartifacts").as_uri(),
    ]


def mlflow_env() -> dict[str, str]:
    """The server without its job runner (model-judging jobs, unused here: fewer processes, faster start)."""
    return {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(processes: list[subprocess.Popen]) -> None:
    """SIGTERM each process group, SIGKILL what is left after a grace period."""
    for process in processes:
        _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + 30
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        _signal_group(process, signal.SIGKILL)


def wait_for(
    url: str, process: subprocess.Popen, log: Path, timeout: float, healthy=lambda body: True
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{process.args[0]} exited ({process.returncode}); see {log}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if healthy(response.read()):
                    return
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit(f"{url} did not answer within {timeout:.0f} s; see {log}")


def airflow_healthy(body: bytes) -> bool:
    status = json.loads(body)
    return all(
        status.get(c, {}).get("status") == "healthy" for c in ("scheduler", "triggerer", "dag_processor")
    )


def password(home: Path) -> str:
    """The admin password SimpleAuthManager generated (its file, written when the api-server starts)."""
    path = home / "simple_auth_manager_passwords.json.generated"
    try:
        return json.loads(path.read_text()).get("admin", "?")
    except (OSError, ValueError):
        return f"? (see {path})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--home", type=Path, default=REPO / ".airflow-demo", help="AIRFLOW_HOME (default: make demo's)"
    )
    parser.add_argument("--port", type=int, default=8080, help="Airflow UI port")
    parser.add_argument(
        "--mlflow-port", type=int, default=5000, help="MLflow UI port ([ml_training] mlflow_ui_url)"
    )
    parser.add_argument("--only", choices=["airflow", "mlflow"], help="start one of the two")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address both UIs listen on (default: loopback only; 0.0.0.0: every interface)")
    args = parser.parse_args(argv)
    home = args.home.resolve()
    (home / "ml").mkdir(parents=True, exist_ok=True)
    mlflow_url = f"http://127.0.0.1:{args.mlflow_port}"
    processes: list[subprocess.Popen] = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        lines = []
        if args.only != "airflow":
            if not MLFLOW.exists():
                raise SystemExit(f"{MLFLOW} is missing: run `make mlflow-env` (the full mlflow package)")
            log = home / "mlflow-ui.log"
            processes.append(start(mlflow_argv(home, args.mlflow_port, args.host), mlflow_env(), log))
            wait_for(f"{mlflow_url}/health", processes[-1], log, timeout=300)
            lines.append(f"MLflow UI   {mlflow_url}   registry {home / 'ml' / 'mlflow.db'}   (log: {log})")
        if args.only != "mlflow":
            if not (VENV_BIN / "airflow").exists():
                raise SystemExit(f"no airflow in {VENV_BIN}: run this with the control environment's python")
            log = home / "airflow.log"
            env = airflow_env(home, args.port, mlflow_url, args.host)
            airflow = str(VENV_BIN / "airflow")
            print(f"Starting Airflow (api-server, scheduler, dag-processor, triggerer) in {home}, listening on "
                  f"{args.host} only (log: {log}) ...", flush=True)
            with open(log, "ab") as out:
                subprocess.run([airflow, "db", "migrate"], env=env, stdout=out, stderr=subprocess.STDOUT, check=True)
                unpaused = subprocess.run([sys.executable, str(REPO / "scripts" / "asset_schedules.py")], env=env,
                                          stdout=subprocess.PIPE, stderr=out, text=True, check=True).stdout.split()
            processes += [start([airflow, *command], env, log) for command in COMPONENTS]
            url = f"http://127.0.0.1:{args.port}"
            api_server = processes[-len(COMPONENTS)]
            wait_for(f"{url}/api/v2/monitor/health", api_server, log, timeout=420, healthy=airflow_healthy)
            lines.insert(0, f"Airflow UI  {url}   log in as admin / {password(home)}   (log: {log})")
            lines.append("Trigger ml_training_pipeline from its page (Trigger, defaults as they are).")
            if unpaused:
                lines.append(f"Unpaused {', '.join(unpaused)} (it runs on the model versions the pipeline registers).")
        listening = [f"Airflow :{args.port}"] * (args.only != "mlflow") + [f"MLflow :{args.mlflow_port}"] * (
            args.only != "airflow")
        lines.append(f"Listening on {args.host} only ({', '.join(listening)}); no log server (task logs are read "
                     "from files). --host 0.0.0.0 listens on every interface.")
        print("\n".join(lines) + "\nCtrl-C stops everything.", flush=True)
        while all(process.poll() is None for process in processes):
            time.sleep(1)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stop(processes)


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    sys.exit(main())
