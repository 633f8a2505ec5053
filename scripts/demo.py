"""`make demo`: run, for real, on the embedded defaults (local backend, SQLite model registry), first the
ml_quickstart DAG (a 2-worker Horovod/TensorFlow model and a 2-worker LightGBM model), then the
ml_training_pipeline DAG, and say where the data, models, metrics, artifacts and registered version are.

The terminal shows progress only (scripts/demo_progress.py: tasks as they start and end, the training
jobs' metric lines); Airflow's own logging goes to $AIRFLOW_HOME/demo-airflow.log, named up front."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from demo_progress import run_quietly, terminal

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("AIRFLOW_HOME", str(REPO / ".airflow-demo"))
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
# The MLflow UI that `make mlflow-ui` / `make ui` serve over the demo's embedded registry (scripts/ui.py's default
# port): the runs' MLflow links point there (a deployment without a UI has none).
os.environ.setdefault("AIRFLOW__ML_TRAINING__MLFLOW_UI_URL", "http://127.0.0.1:5000")


LOG = Path(os.environ["AIRFLOW_HOME"]) / "demo-airflow.log"
say = terminal()


def _opt_out_where_no_sandbox() -> None:
    """The demo's machine is its user's own: where no sandbox can be made (no bubblewrap, which needs root or
    sudo to install) it says so and runs its jobs unsandboxed, an opt-out a deployment must make itself."""
    from airflow_ml_provider.jobs.backends.local.sandbox import unavailable

    if (why := unavailable()) is not None:
        say(f"no sandbox for local jobs here ({why}): the demo runs them unsandboxed (local_sandbox=auto)")
        os.environ["AIRFLOW_CONN_ML_TRAINING_DEFAULT"] = json.dumps(
            {"conn_type": "mltraining", "extra": {"local_sandbox": "auto"}})


def main() -> int:
    LOG.parent.mkdir(parents=True, exist_ok=True)
    LOG.write_text("")
    say(f"Airflow's own logging (task logs included) goes to {LOG}")
    _opt_out_where_no_sandbox()
    with LOG.open("a") as log:
        subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, stdout=log, stderr=log)
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    sys.path.insert(0, str(REPO / "dags"))
    quickstart = _quickstart(XComModel, create_session)
    _leave_asset_dags_running()
    if not quickstart:
        return 1
    from ml_training_pipeline import dag

    say("\n==== ml_training_pipeline: preprocess, train, evaluate, gate, deploy ====")
    started = time.monotonic()
    dag_run = run_quietly(dag, LOG, say)
    took = time.monotonic() - started
    with create_session() as session:
        rows = session.query(XComModel).filter_by(dag_id=dag.dag_id, run_id=dag_run.run_id, map_index=-1)
        xcom = {(row.task_id, row.key): row.value for row in rows}
    say("\n==== airflow-ml-provider demo: ml_training_pipeline ====")
    say(f"DAG run {dag_run.run_id}: {dag_run.state} in {took:.0f} s")
    deploy = xcom.get(("deploy", "return_value"))
    if deploy is None:
        say(f"the run did not finish; see the task logs in {LOG}")
        return 1
    _report(xcom, deploy)
    return 0 if str(dag_run.state) == "success" else 1


def _leave_asset_dags_running() -> None:
    """dag.test() registered every DAG of the folder paused: ml_batch_scoring must run on the model's events."""
    from asset_schedules import unpause_asset_scheduled

    if unpaused := unpause_asset_scheduled():
        say(f"unpaused {', '.join(unpaused)}: it runs whenever ml_training_pipeline registers a model version")


def _quickstart(xcom_model, create_session) -> bool:
    """The two distributed trainings side by side: where each model is and what it scored."""
    from ml_quickstart import dag

    say("==== ml_quickstart: a 2-worker Horovod and a 2-worker LightGBM model ====")
    dag_run = run_quietly(dag, LOG, say)
    with create_session() as session:
        row = session.query(xcom_model).filter_by(dag_id=dag.dag_id, run_id=dag_run.run_id, task_id="report",
                                                  key="return_value").one_or_none()
    say("\n==== airflow-ml-provider demo: ml_quickstart ====")
    say(f"DAG run {dag_run.run_id}: {dag_run.state}")
    for name, result in (row.value if row else {}).items():
        say(f"{name:9s} {result['metrics']} -> model {result['model_path']} (job {result['job_name']})")
    return str(dag_run.state) == "success"


def _report(xcom: dict, deploy: dict) -> None:
    from airflow_ml_provider.hooks.model_registry import ModelRegistryHook

    registry = ModelRegistryHook()
    train = xcom.get(("train_lightgbm", "return_value")) or xcom[("train_horovod", "return_value")]
    evaluation, gate = xcom[("evaluate", "return_value")], xcom[("gate", "return_value")]
    with registry.mlflow() as mlflow:
        artifacts = mlflow.MlflowClient().get_run(evaluation["mlflow_run_id"]).info.artifact_uri
    say(
        f"data        version {xcom[('prepare_data', 'data_version')]}; preprocessed shards in "
        f"{xcom[('prepare_data', 'processed')]}"
    )
    say(f"training    {evaluation['framework']} job {train['job_name']} ({train['backend']} backend)")
    say(f"            model:   {train['model_path']}")
    say(f"            final training metrics: {json.dumps(train['metrics'])}")
    say(f"evaluation  held-out metrics: {json.dumps(evaluation['metrics'])}")
    say(
        f"            MLflow run {evaluation['mlflow_run_id']}; artifacts (training_curve.png, "
        f"evaluation_report.md, metrics.json): {artifacts}"
    )
    say(f"gate        {'PASSED' if gate['passed'] else 'REJECTED'}: {'; '.join(gate['reasons'])}")
    say(
        f"registry    model {deploy['model_name']} version {deploy['version']}, aliases: "
        f"{', '.join(deploy['aliases'])}; load it with mlflow.pyfunc.load_model('{deploy['model_uri']}')"
    )
    say(f"            store: {registry.settings().tracking_uri}")
    say(
        f"            link:  {deploy['url']} (`make mlflow-ui` serves it; `make ui`: Airflow's UI as well)"
    )
    say(f"job logs    {Path(os.environ['AIRFLOW_HOME']) / 'ml' / 'jobs'}")
    say(
        "run `make demo` again: the new model is registered as challenger and becomes champion only if it"
        " passes the gate"
    )


if __name__ == "__main__":
    sys.exit(main())
