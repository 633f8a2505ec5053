"""The shipped batch-scoring DAG runs on the model Asset event a deploy emits (and preprocessing emits
data Asset events).

A producer (tests/dags/ml_asset_test_dags.py: a tiny model, then the real DeployModelOperator with the
pipeline's model Asset as outlet) runs with dag.test(); Airflow records the event with the deploy's
extra and queues the consumer. The scheduler's own code then creates the consumer's asset-triggered
run (what `airflow scheduler` does each loop), and that run's tasks execute as dag.test() executes
tasks: the consumer reads the event's extra and scores with exactly that model version.
"""

from __future__ import annotations

import csv
import json
import uuid
from pathlib import Path

import pytest
from dag_runs import load_dag, run, run_tasks

from support import REPO, TEST_DAGS, needs_horovod, needs_torch

pytestmark = pytest.mark.integration

NAME = f"asset_test_{uuid.uuid4().hex[:8]}"


def _sync_dags() -> None:
    """Parse dags/ and tests/dags into the metadata DB as the DAG processor does, let the scheduler's
    asset bookkeeping activate the Assets they declare (retiring any an earlier revision declared under
    the same name), and unpause the consumer."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.models.asset import AssetDagRunQueue
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        DagBundlesManager().sync_bundles_to_db(session=session)
    for name, folder in (("shipped", REPO / "dags"), ("tests", TEST_DAGS)):
        sync_bag_to_db(BundleDagBag(dag_folder=str(folder), bundle_path=folder, bundle_name=name), name, None)
    with create_session() as session:
        SchedulerJobRunner(job=Job())._update_asset_orphanage(session=session)
        session.get(DagModel, "ml_batch_scoring").is_paused = False
        # Other tests' pipeline runs in this metadata DB queued the consumer too, and no scheduler ran it;
        # a queue entry that old would keep this test's newer event for the run after next.
        session.query(AssetDagRunQueue).filter(AssetDagRunQueue.target_dag_id == "ml_batch_scoring").delete()


def _schedule_asset_triggered_run(dag_id: str):
    """The scheduler's step that turns queued Asset events into a DAG run; returns the run."""
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType
    from sqlalchemy import select

    with create_session() as session:
        query, triggered = DagModel.dags_needing_dagruns(session)
        assert dag_id in triggered, f"{dag_id} was not queued by the Asset event: {sorted(triggered)}"
        models = [m for m in query.all() if m.dag_id == dag_id]
        SchedulerJobRunner(job=Job())._create_dag_runs_asset_triggered(dag_models=models, session=session)
        session.flush()
        dag_run = session.scalars(
            select(DagRun)
            .where(DagRun.dag_id == dag_id, DagRun.run_type == DagRunType.ASSET_TRIGGERED)
            .order_by(DagRun.id.desc())
            .limit(1)
        ).one()
        dag_run.state = DagRunState.RUNNING  # what the scheduler does next with a queued run
        return dag_run.run_id


def _execute(dag, run_id: str) -> dict:
    """Run the tasks of an existing DAG run in this process, as dag.test() runs its own run's tasks."""
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.sdk.definitions.dag import _run_task
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.session import create_session

    scheduler_dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
    with create_session() as session:
        dag_run = session.query(DagRun).filter_by(dag_id=dag.dag_id, run_id=run_id).one()
        dag_run.dag = scheduler_dag
        run_tasks(dag_run, session, lambda ti: _run_task(ti=ti, task=dag.task_dict[ti.task_id]))
        rows = session.query(XComModel).filter_by(dag_id=dag.dag_id, run_id=run_id, key="return_value")
        return {"state": str(dag_run.state), **{row.task_id: row.value for row in rows}}


def test_batch_scoring_runs_on_the_model_asset_event(airflow_db):
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    _sync_dags()
    producer = load_dag(TEST_DAGS / "ml_asset_test_dags.py", "asset_producer")
    produced = producer.test(run_conf={"model_name": NAME})
    assert str(produced.state) == "success"

    with create_session() as session:
        events = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.name == "ml_training_pipeline.model", AssetEvent.source_run_id == produced.run_id)
            .all()
        )
        assert len(events) == 1
        extra, event_id = events[0].extra, events[0].id
    assert {k: extra[k] for k in ("name", "version", "model_uri", "aliases", "metrics", "run_id", "data_version")} == {
        "name": NAME, "version": 1, "model_uri": f"models:/{NAME}/1", "aliases": ["challenger", "champion"],
        "metrics": {"accuracy": 0.9}, "run_id": produced.run_id, "data_version": "feedface",
    }
    assert extra["mlflow_run_id"]
    assert extra["bundle_version"] == "unversioned"  # dag.test(): no bundle checkout (see test_bundle_lineage.py)
    with create_session() as session:
        [data_event] = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.name == "ml_asset_producer_test.data", AssetEvent.source_run_id == produced.run_id)
            .all()
        )
        data = data_event.extra
    assert data["data_version"] == "feedface" and data["output"].endswith("processed.npz")
    assert data["rows"] == 10 and len(data["sha256"]) == 64

    run_id = _schedule_asset_triggered_run("ml_batch_scoring")
    with create_session() as session:
        consumed = session.query(DagRun).filter_by(dag_id="ml_batch_scoring", run_id=run_id).one().consumed_asset_events
        assert event_id in [event.id for event in consumed]

    consumer = load_dag(REPO / "dags" / "ml_batch_scoring.py")
    for scoring_task in consumer.tasks:  # the model this deployment scores with (the example's: the pipeline's default)
        scoring_task.params["model_name"] = NAME
    result = _execute(consumer, run_id)
    assert result["state"] == "success", result
    scored = result["score"]
    assert scored["model_uri"] == f"models:/{NAME}/1"
    assert scored["trigger"] == f"asset event of DAG run {produced.run_id}"
    with open(scored["predictions"]) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == scored["rows"] == 1000
    assert {row["label"] for row in rows} <= {"0", "1"}
    with open(Path(scored["predictions"]).with_name("lineage.json")) as f:  # which version scored, beside its output
        assert json.load(f) == {"model_name": NAME, "version": 1, "model_uri": f"models:/{NAME}/1",
                                "dag_id": "ml_batch_scoring", "run_id": run_id, "predictions": "predictions.csv"}
    assert (scored["model_name"], scored["version"]) == (NAME, 1)



def test_batch_scoring_does_not_score_a_version_the_gate_rejected(airflow_db):
    """Issue 25 D2: a version registered after a gate rejection (no alias) triggers the scoring DAG, which
    names it and scores nothing."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    _sync_dags()
    producer = load_dag(TEST_DAGS / "ml_asset_test_dags.py", "asset_producer")
    name = f"asset_test_rejected_{uuid.uuid4().hex[:8]}"
    produced = producer.test(run_conf={"model_name": name, "gate_passed": False})
    assert str(produced.state) == "success"

    run_id = _schedule_asset_triggered_run("ml_batch_scoring")
    consumer = load_dag(REPO / "dags" / "ml_batch_scoring.py")
    for scoring_task in consumer.tasks:
        scoring_task.params["model_name"] = name
    result = _execute(consumer, run_id)
    assert "score" not in result, "nothing was scored"
    with create_session() as session:
        states = {ti.task_id: str(ti.state) for ti in session.query(TaskInstance).filter_by(
            dag_id="ml_batch_scoring", run_id=run_id)}
    assert states == {"choose_model": "skipped", "score": "skipped"}, states


@pytest.mark.parametrize("framework", [pytest.param("horovod", marks=needs_horovod),
                                       pytest.param("pytorch", marks=needs_torch), "xgboost"])
def test_a_horovod_pytorch_or_xgboost_champion_is_scored_by_the_asset_triggered_run(airflow_db, framework):
    """Issue 25 D1, issue 22, issue 42: the real pipeline trains a Horovod (Keras), PyTorch (DDP) or XGBoost model
    (2 workers and their tracker) that is evaluated, registered and becomes champion; the scoring run its Asset
    event triggers scores with it in a job on that framework's environment (TensorFlow, torch, xgboost), which
    the Airflow worker may lack (it failed with "No module named 'keras'" when the model was loaded in the task)."""
    _sync_dags()
    name = f"ml_training_pipeline.{framework}_{uuid.uuid4().hex[:8]}"  # a new model: its first version is champion
    workers = 2 if framework == "xgboost" else 1
    trained = run(load_dag(REPO / "dags" / "ml_training_pipeline.py"),
                  {"model_name": name, "framework": framework, "epochs": 2, "workers": workers, "min_accuracy": 0.5})
    assert trained.state == "success", trained.states
    if framework == "xgboost":
        assert trained.value("train_xgboost")["model_path"].endswith("/model.ubj")
        assert trained.value("evaluate")["framework"] == "xgboost"
        assert trained.value("evaluate")["metrics"]["accuracy"] > 0.8, trained.value("evaluate")
    assert trained.value("deploy")["aliases"] == ["challenger", "champion"]

    run_id = _schedule_asset_triggered_run("ml_batch_scoring")
    consumer = load_dag(REPO / "dags" / "ml_batch_scoring.py")
    for scoring_task in consumer.tasks:
        scoring_task.params["model_name"] = name
    result = _execute(consumer, run_id)
    assert result["state"] == "success", result
    scored = result["score"]
    assert (scored["model_uri"], scored["framework"], scored["why"]) == (f"models:/{name}/1", framework, "the champion")
    with open(scored["predictions"]) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == scored["rows"] == 1000 and sum(scored["label_counts"].values()) == 1000
    assert {row["label"] for row in rows} <= set(map(str, range(10)))  # the digits model's classes
    with open(Path(scored["predictions"]).with_name("lineage.json")) as f:
        assert json.load(f)["model_uri"] == f"models:/{name}/1"
