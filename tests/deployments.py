"""Real Airflow deployments (tests/airflow_stack.py) serving the shipped DAGs on the embedded defaults, with
the MLflow UI over their registry (scripts/ui.py's server, from .venv-mlflow), for the browser tests and the
REST tests: a module asks for ``deployment`` (or ``stack``); the files of one ``support.SHARED_DEPLOYMENTS``
group share one. tests/conftest.py makes these fixtures (and the hook that tells ``deployment`` the next
test) visible to every test folder."""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
from pathlib import Path
from typing import Any

import pytest
from airflow_stack import AirflowStack

from airflow_ml_provider.jobs.backends.local.ports import free_ports
from support import REPO, TRAINING_IMAGE, deployment_group

_following: dict = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    """The test that runs next, for ``deployment``'s teardown (which runs within this hook's)."""
    _following["item"] = nextitem


def _ui_script():
    spec = importlib.util.spec_from_file_location("ui_script", REPO / "scripts" / "ui.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dag_files() -> list[str]:
    """The repository files the deployment serves, relative to the repository (a test module overrides
    this fixture to serve more: ``dags/ml_recipes.py`` with the ``recipes/*.yaml`` it reads, say)."""
    return ["dags/ml_training_pipeline.py"]


@pytest.fixture(scope="module")
def serves_mlflow_ui() -> bool:
    """Whether the deployment has the MLflow UI beside it, its links pointing there (a module that opens
    no MLflow link overrides this: the UI server costs about 7 CPU s to start)."""
    return True


class Deployments:
    """This worker's deployments, one per set of served files (and MLflow UI or not), each started when a
    module first asks for it: test files serving the same in one group of ``support.SHARED_DEPLOYMENTS`` share it."""

    def __init__(self, tmp_path_factory):
        self.tmp_path_factory = tmp_path_factory
        self.running: dict[tuple[tuple[str, ...], bool], tuple[contextlib.ExitStack, dict]] = {}

    def get(self, files: list[str], mlflow_ui: bool) -> dict:
        key = (tuple(files), mlflow_ui)
        if key not in self.running:
            with contextlib.ExitStack() as stack:
                started = stack.enter_context(_deployment(files, mlflow_ui, self.tmp_path_factory))
                self.running[key] = (stack.pop_all(), started)
        return self.running[key][1]

    def attach(self, files: list[str], mlflow_ui: bool, name: str, open_it) -> Any:
        """What ``open_it(stack)`` (a context manager: a logged-in browser page, say) gives, opened once per
        deployment, when a module first asks for it, and closed before the deployment stops."""
        running, started = self.running[(tuple(files), mlflow_ui)]
        if name not in started:
            started[name] = running.enter_context(open_it(started["stack"]))
        return started[name]

    def stop(self, files: list[str], mlflow_ui: bool) -> None:
        if (running := self.running.pop((tuple(files), mlflow_ui), None)) is not None:
            running[0].close()


@pytest.fixture(scope="session")
def deployments(tmp_path_factory):
    started = Deployments(tmp_path_factory)
    yield started
    for files, mlflow_ui in list(started.running):
        started.stop(list(files), mlflow_ui)


@contextlib.contextmanager
def _deployment(dag_files: list[str], with_mlflow_ui: bool, tmp_path_factory):
    """Airflow serving ``dag_files`` (by default the shipped ml_training_pipeline DAG) on the embedded
    defaults (local backend, SQLite registry under the deployment's AIRFLOW_HOME); ``with_mlflow_ui``, its
    MLflow links point at the MLflow UI over that registry (as ``make mlflow-ui`` serves it; None, and the
    link checks skip, where ``.venv-mlflow`` is not built). The files keep their place relative to each other (a
    ``dags/`` and a ``recipes/`` folder side by side, as ml_recipes.py expects)."""
    home = tmp_path_factory.mktemp("airflow-ui")
    served = tmp_path_factory.mktemp("ui-served")
    for name in dag_files:
        (served / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, served / name)
    env = {"AIRFLOW_ML_LOCAL_IMAGE": str(TRAINING_IMAGE)}
    with contextlib.ExitStack() as running:
        mlflow_ui = running.enter_context(_mlflow_ui(home)) if with_mlflow_ui else None
        if mlflow_ui:
            env["AIRFLOW__ML_TRAINING__MLFLOW_UI_URL"] = mlflow_ui["url"]
        stack = running.enter_context(AirflowStack(home, dags_folder=served / "dags", env=env))
        stack.wait_for_dag("ml_training_pipeline")
        if mlflow_ui:
            mlflow_ui["wait"](f"{mlflow_ui['url']}/health", mlflow_ui["process"], mlflow_ui["log"], timeout=300)
        yield {"home": home, "mlflow_ui": mlflow_ui, "stack": stack}


@contextlib.contextmanager
def _mlflow_ui(home: Path):
    ui = _ui_script()
    if not ui.MLFLOW.exists():
        yield None
        return
    (home / "ml").mkdir(parents=True, exist_ok=True)
    [port], log = free_ports(1), home / "mlflow-ui.log"
    process = ui.start(ui.mlflow_argv(home, port), ui.mlflow_env(), log)
    try:
        yield {"url": f"http://127.0.0.1:{port}", "process": process, "log": log, "wait": ui.wait_for}
    finally:
        ui.stop([process])


@pytest.fixture(scope="module")
def deployment(request, deployments, dag_files, serves_mlflow_ui):
    """The module's deployment: stopped after the module, unless the next test's file shares it."""
    yield deployments.get(dag_files, serves_mlflow_ui)
    following, group = _following.get("item"), deployment_group(request.node.nodeid)
    if group is None or following is None or deployment_group(following.nodeid) != group:
        deployments.stop(dag_files, serves_mlflow_ui)


@pytest.fixture(scope="module")
def ui_home(deployment) -> Path:
    """The deployment's AIRFLOW_HOME (its embedded registry is under ``ml/``)."""
    return deployment["home"]


@pytest.fixture(scope="module")
def mlflow_ui(deployment):
    return deployment["mlflow_ui"]


@pytest.fixture(scope="module")
def stack(deployment) -> AirflowStack:
    return deployment["stack"]
