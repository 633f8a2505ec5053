"""Versioned deployments: a real git repository as Airflow's GitDagBundle, two commits. A DAG run triggered
on the first keeps it after the second is deployed (parsed into the metadata DB as the DAG processor
does); its tasks run as a worker runs them (Airflow's task runner `parse`: the bundle checked out at the
run's pinned version, the DAG file loaded from that checkout), and the registered model version's tags
name the first commit and carry what the first commit's code computed."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import uuid
from datetime import datetime, timezone
from uuid import UUID

import pytest
from dag_runs import run_tasks

from airflow_ml_provider.hooks.model_registry import ModelRegistryHook

pytestmark = pytest.mark.integration

DAG_ID = "ml_bundle_lineage_test"
MODEL = f"bundle_lineage_test_{uuid.uuid4().hex[:8]}"
DAG_FILE = "dags/lineage_dag.py"


def _dag_source(mark: str) -> str:
    """A producer whose evaluation reports ``mark`` as its data version: what each commit's code computes."""
    return textwrap.dedent(f'''\
        from airflow.sdk import DAG, task

        from airflow_ml_provider.operators.deploy import DeployModelOperator

        MARK = {mark!r}

        with DAG({DAG_ID!r}, schedule=None, params={{"model_name": {MODEL!r}}}):

            @task
            def evaluation(params: dict, run_id: str) -> dict:
                import hashlib
                import os
                from pathlib import Path

                import lightgbm as lgb
                import numpy as np

                from airflow_ml_provider.hooks.model_registry import ModelRegistryHook

                rng = np.random.default_rng(0)
                X = rng.normal(size=(200, 3)).astype(np.float32)
                y = (X[:, 0] > 0).astype(int)
                model = Path(os.environ["AIRFLOW_HOME"], "ml", "artifacts", "bundle-test", run_id, "model.txt")
                model.parent.mkdir(parents=True, exist_ok=True)
                lgb.train({{"objective": "binary", "verbosity": -1, "num_threads": 1}}, lgb.Dataset(X, y),
                          3).save_model(model)
                registry = ModelRegistryHook()
                with registry.mlflow() as mlflow:
                    client = mlflow.MlflowClient()
                    run = client.create_run(registry.experiment_id("bundle_lineage_test"))
                    client.set_terminated(run.info.run_id)
                return {{
                    "framework": "lightgbm", "model_path": str(model), "mlflow_run_id": run.info.run_id,
                    "metrics": {{"accuracy": 0.9}}, "n_features": 3, "n_classes": 2,
                    "lineage": {{"dag_id": {DAG_ID!r}, "run_id": run_id, "data_version": MARK,
                                "model_sha256": hashlib.sha256(model.read_bytes()).hexdigest()}},
                }}

            DeployModelOperator(
                task_id="deploy",
                model_name="{{{{ params.model_name }}}}",
                model_names=["bundle_lineage_test*"],
                evaluation=evaluation(),
                gate={{"passed": True, "reasons": ["test"]}},
            )
    ''')


def _commit(repo, mark: str) -> str:
    (repo / "dags").mkdir(exist_ok=True)
    (repo / DAG_FILE).write_text(_dag_source(mark))
    git = ["git", "-C", str(repo), "-c", "user.email=ci@example.com", "-c", "user.name=ci"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", f"pipeline {mark}"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


def _parse_version(bundle) -> str:
    """The DAG processor's step: parse the bundle's current version into the metadata DB; returns it."""
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db

    version = bundle.get_current_version()
    version = getattr(version, "version", version)
    bag = BundleDagBag(dag_folder=str(bundle.path), bundle_path=bundle.path, bundle_name=bundle.name)
    assert DAG_ID in bag.dags, bag.import_errors
    sync_bag_to_db(bag, bundle.name, version)
    return version


def _run_task_on_worker(ti, version: str | None, dag) -> str:
    """Run one task instance as a worker does: the supervisor starts it through the Execution API, and
    Airflow's task runner ``parse`` checks the bundle out at the run's version and loads the DAG file from
    there (the in-process supervisor of dag.test() with the worker's own startup step)."""
    import psutil
    import structlog
    from airflow.sdk.api.datamodels._generated import BundleInfo
    from airflow.sdk.api.datamodels._generated import TaskInstance as TaskInstanceSDK
    from airflow.sdk.execution_time.comms import StartupDetails
    from airflow.sdk.execution_time.supervisor import (
        InProcessSupervisorComms,
        InProcessTestSupervisor,
        set_supervisor_comms,
    )
    from airflow.sdk.execution_time.task_runner import finalize, parse, run
    from airflow.utils.state import TaskInstanceState

    ti.set_state(TaskInstanceState.QUEUED)
    what = TaskInstanceSDK(id=UUID(str(ti.id)), task_id=ti.task_id, dag_id=ti.dag_id, run_id=ti.run_id,
                           try_number=ti.try_number, map_index=ti.map_index,
                           dag_version_id=UUID(str(ti.dag_version_id)))
    supervisor = InProcessTestSupervisor(
        id=what.id, pid=os.getpid(), process=psutil.Process(), process_log=structlog.get_logger("task").bind(),
        client=InProcessTestSupervisor._api_client(dag),
    )
    supervisor.comms = InProcessSupervisorComms(supervisor=supervisor)
    log = structlog.get_logger(logger_name="task")
    with set_supervisor_comms(supervisor.comms):
        supervisor.ti = what
        start = datetime.now(tz=timezone.utc)
        context = supervisor.client.task_instances.start(supervisor.id, supervisor.pid, start)
        runtime_ti = parse(StartupDetails(ti=what, dag_rel_path=DAG_FILE, start_date=start, ti_context=context,
                                          bundle_info=BundleInfo(name="pipelines", version=version),
                                          sentry_integration=""), log)
        with supervisor._setup_subprocess_socket():
            task_context = runtime_ti.get_template_context()
            state, _, error = run(runtime_ti, task_context, log)
            finalize(runtime_ti, state, task_context, log, error)
            supervisor.update_task_state_if_needed()
    return str(state)


def test_a_run_started_on_the_first_commit_finishes_on_it_and_its_model_names_it(airflow_db, tmp_path, monkeypatch):
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.models.dag import DagModel
    from airflow.models.dagbag import DBDagBag
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType

    repo = tmp_path / "pipelines"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    first = _commit(repo, "first")
    bundles = json.loads(os.environ["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"])
    bundles.append({"name": "pipelines", "classpath": "airflow.providers.git.bundles.git.GitDagBundle",
                    "kwargs": {"repo_url": str(repo), "tracking_ref": "main"}})
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps(bundles))
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_STORAGE_PATH", str(tmp_path / "bundles"))

    with create_session() as session:
        DagBundlesManager().sync_bundles_to_db(session=session)
    tracking = DagBundlesManager().get_bundle("pipelines")
    tracking.initialize()
    assert _parse_version(tracking) == first
    with create_session() as session:
        session.get(DagModel, DAG_ID).is_paused = False
        run_id = trigger_dag(DAG_ID, triggered_by=DagRunTriggeredByType.TEST, session=session).run_id
        session.commit()

    second = _commit(repo, "second")  # the next version is deployed while the run has not run a task yet
    tracking.refresh()
    assert _parse_version(tracking) == second
    with create_session() as session:
        assert session.get(DagModel, DAG_ID).bundle_version == second

    with create_session() as session:
        dag_run = session.query(DagRun).filter_by(dag_id=DAG_ID, run_id=run_id).one()
        assert dag_run.bundle_version == first, "the run keeps the version it started on"
        dag_run.dag = DBDagBag().get_dag_for_run(dag_run, session=session)  # the run's own DAG version
        dag_run.state = DagRunState.RUNNING
        session.commit()
        states = {}
        run_tasks(dag_run, session, lambda ti: states.update(
            {ti.task_id: _run_task_on_worker(ti, dag_run.bundle_version, dag_run.dag)}))
        assert str(dag_run.state) == "success", states

    registry = ModelRegistryHook()
    with registry.mlflow() as mlflow:
        [version] = mlflow.MlflowClient().search_model_versions(f"name = '{MODEL}'")
    tags = version.tags
    assert (tags["airflow.bundle_name"], tags["airflow.bundle_version"]) == ("pipelines", first)
    assert tags["airflow.data_version"] == "first", "the first commit's code ran"
    assert (tags["airflow.dag_id"], tags["airflow.run_id"]) == (DAG_ID, run_id)
