"""Real Airflow deployments (tests/airflow_stack.py: on PostgreSQL) serving the shipped DAGs, for the browser
tests and the REST tests, with an MLflow tracking server (tests/tracking_server.py: .venv-mlflow's, its backend
store in PostgreSQL) as their registry, or on the embedded SQLite registry where a module asks for no server: a module asks for ``deployment`` (or ``stack``); the files of one ``support.SHARED_DEPLOYMENTS``
group share one. tests/conftest.py makes these fixtures (and the hook that tells ``deployment`` the next
test) visible to every test folder."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any

import pytest
import tracking_server
from airflow_stack import AirflowStack

from support import REPO, TRAINING_IMAGE, deployment_group

_following: dict = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    """The test that runs next, for ``deployment``'s teardown (which runs within this hook's)."""
    _following["item"] = nextitem


@pytest.fixture(scope="module")
def dag_files() -> list[str]:
    """The repository files the deployment serves, relative to the repository (a test module overrides
    this fixture to serve more: ``dags/ml_recipes.py`` with the ``recipes/*.yaml`` it reads, say)."""
    return ["dags/ml_training_pipeline.py"]


@pytest.fixture(scope="module")
def serves_mlflow_ui() -> bool:
    """Whether the deployment has an MLflow tracking server as its registry, the tasks' MLflow links pointing
    at it (a module that opens no MLflow link may override this and run on the embedded SQLite registry,
    which it reads itself: the server costs about 7 CPU s to start)."""
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
def _deployment(dag_files: list[str | tuple[str, str]], with_mlflow_ui: bool, tmp_path_factory):
    """Airflow serving ``dag_files`` (by default the shipped ml_training_pipeline DAG) with the local backend;
    ``with_mlflow_ui``: its registry is an MLflow tracking server (its artifacts under the deployment's
    ``ml/mlartifacts``), the connection ``ml_registry_default`` pointing at it, whose URL the MLflow links
    carry (None, and the link checks skip, where ``.venv-mlflow`` is not built); else the embedded SQLite
    registry under the deployment's AIRFLOW_HOME, with no MLflow link. The files keep their place relative to
    each other (a ``dags/`` and a ``recipes/`` folder side by side, as ml_recipes.py expects); a ``(source,
    served)`` pair serves a test's file at a place of its own (a test recipe in ``recipes/``)."""
    home = tmp_path_factory.mktemp("airflow-ui")
    served = tmp_path_factory.mktemp("ui-served")
    for name in dag_files:
        source, target = (name, name) if isinstance(name, str) else name
        (served / target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / source, served / target)
    env = {"AIRFLOW_ML_LOCAL_IMAGE": str(TRAINING_IMAGE)}
    with contextlib.ExitStack() as running:
        mlflow_ui = None
        if with_mlflow_ui and tracking_server.unavailable() is None:
            mlflow_ui = running.enter_context(
                tracking_server.tracking_server(home / "ml" / "mlartifacts", home / "mlflow-server.log", wait=False))
            env["AIRFLOW_CONN_ML_REGISTRY_DEFAULT"] = tracking_server.registry_connection(mlflow_ui)
        stack = running.enter_context(AirflowStack(home, dags_folder=served / "dags", env=env))
        stack.wait_for_dag("ml_training_pipeline")
        if mlflow_ui:
            mlflow_ui["wait"]()
        yield {"home": home, "mlflow_ui": mlflow_ui, "stack": stack}


@pytest.fixture(scope="module")
def deployment(request, deployments, dag_files, serves_mlflow_ui):
    """The module's deployment: stopped after the module, unless the next test's file shares it."""
    yield deployments.get(dag_files, serves_mlflow_ui)
    following, group = _following.get("item"), deployment_group(request.node.nodeid)
    if group is None or following is None or deployment_group(following.nodeid) != group:
        deployments.stop(dag_files, serves_mlflow_ui)


@pytest.fixture(scope="module")
def ui_home(deployment) -> Path:
    """The deployment's AIRFLOW_HOME (an embedded registry is under ``ml/``)."""
    return deployment["home"]


@pytest.fixture(scope="module")
def mlflow_ui(deployment):
    return deployment["mlflow_ui"]


@pytest.fixture(scope="module")
def stack(deployment) -> AirflowStack:
    return deployment["stack"]
