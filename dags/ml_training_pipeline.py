"""The production pipeline, without Airflow plumbing to write: preprocess -> train -> evaluate ->
gate -> deploy to the model marketplace (MLflow Model Registry).

Trigger it from the UI and pick the Params: framework (LightGBM or Horovod), backend, workers,
epochs/rounds, learning rate, data, gate thresholds. Every value is validated by its JSON schema
in the trigger form and reaches jobs as argv data only (no shell, no second template pass).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from airflow.sdk import DAG, Param, conf, task

from airflow_ml_provider.assets import data_asset, model_asset
from airflow_ml_provider.jobs.backends import BACKENDS
from airflow_ml_provider.operators.deploy import DeployModelOperator
from airflow_ml_provider.operators.evaluate import EvaluateModelOperator
from airflow_ml_provider.operators.gate import ModelGateOperator
from airflow_ml_provider.operators.notify import FAILURE_MESSAGE, GATE_MESSAGE, pipeline_notifiers
from airflow_ml_provider.operators.preprocess import PreprocessOperator
from airflow_ml_provider.operators.training import HorovodTrainingOperator, LightGBMTrainingOperator

BACKEND = "{{ params.backend }}"  # "" = the ml_training connection's default backend
WORKERS = "{{ params.workers }}"
MODEL = model_asset("ml_training_pipeline")  # deploy's events schedule dags/ml_batch_scoring.py
DATA = data_asset("ml_training_pipeline")  # one event per preprocessed part of the data
# Who hears of failed trainings and gate rejections: [ml_training] notify_http_conn_id (a chat webhook), or
# put any Airflow notifier here, e.g. [SmtpNotifier(to="ml-team@example.com", ...)] or a SlackNotifier.
FAILURE_NOTIFIERS = pipeline_notifiers(FAILURE_MESSAGE)
GATE_NOTIFIERS = pipeline_notifiers(GATE_MESSAGE)

with DAG(
    dag_id="ml_training_pipeline",
    schedule=None,
    catchup=False,
    tags=["ml", "pipeline", "example"],
    doc_md=__doc__,
    params={
        "framework": Param(
            "lightgbm",
            type="string",
            enum=["lightgbm", "horovod"],
            description="LightGBM (socket data-parallel) or Horovod (TensorFlow/Keras)",
        ),
        "backend": Param(
            "",
            type="string",
            enum=["", *sorted(BACKENDS)],
            values_display={"": "default (the ml_training connection's backend)"},
            description="Where the jobs run",
        ),
        "workers": Param(2, type="integer", minimum=1, maximum=64, description="Workers of the training job"),
        "epochs": Param(3, type="integer", minimum=1, maximum=500, description="Horovod: training epochs"),
        "boost_rounds": Param(60, type="integer", minimum=1, maximum=10_000, description="LightGBM: rounds"),
        "learning_rate": Param(
            0.05, type="number", exclusiveMinimum=0, maximum=1, description="Learning rate"
        ),
        "data_path": Param(
            "",
            type="string",
            pattern=r"^$|^/(?!.*\.\.)[A-Za-z0-9_./-]+\.(npz|csv)$",
            description="Absolute path of an .npz (X, y) or .csv (label column) dataset; "
            "empty: a generated binary classification set",
        ),
        "shards": Param(2, type="integer", minimum=1, maximum=64, description="Preprocessing shards"),
        "model_name": Param(
            "ml_training_pipeline",
            type="string",
            pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$",
            description="Registered model name in the model registry",
        ),
        "gate_metric": Param(
            "accuracy",
            type="string",
            enum=["accuracy", "auc", "f1", "log_loss"],
            description="Metric the challenger must improve on the champion",
        ),
        "min_improvement": Param(
            0.0,
            type="number",
            minimum=0,
            maximum=1,
            description="Required improvement of gate_metric over the champion",
        ),
        "min_accuracy": Param(0.7, type="number", minimum=0, maximum=1, description="Gate: minimum accuracy"),
        "min_auc": Param(0.0, type="number", minimum=0, maximum=1, description="Gate: minimum ROC AUC"),
        "notes": Param(
            "",
            type="string",
            maxLength=500,
            description="Free text stored as the model version's description (data, never run)",
        ),
    },
) as dag:

    @task
    def prepare_data(params: dict, run_id: str, ti=None) -> list[dict]:
        """Split the dataset (or a generated one) into shards and held-out sets; only paths go to XCom:
        the shards to preprocess are the return value (mapped over), the rest have their own keys."""
        from airflow_ml_provider.runtime.datasets import write_synthetic
        from airflow_ml_provider.runtime.splits import split_dataset

        home = Path(os.environ.get("AIRFLOW_HOME", "~/airflow")).expanduser()
        root = Path(conf.get("ml_training", "data_root", fallback=str(home / "ml" / "data")))
        out = root / "ml_training_pipeline" / hashlib.sha256(run_id.encode()).hexdigest()[:12]
        source = params["data_path"]
        if not source:
            out.mkdir(parents=True, exist_ok=True)
            source = out / "source.npz"
            write_synthetic(source, rows=20_000, features=20, seed=0)
        split = split_dataset(source, out, params["shards"])
        classes = split.pop("n_classes")
        split.update(
            objective="binary" if classes <= 2 else "multiclass", num_class=1 if classes <= 2 else classes
        )
        for key, value in split.items():
            if key != "items":
                ti.xcom_push(key, value)
        return split["items"]

    @task.branch
    def choose_framework(params: dict) -> str:
        return f"train_{params['framework']}"

    prepared = prepare_data()
    preprocess = PreprocessOperator.partial(task_id="preprocess",
        outlets=[DATA],
        data_version=prepared["data_version"], backend=BACKEND).expand_kwargs(prepared)
    train_lightgbm = LightGBMTrainingOperator(
        task_id="train_lightgbm",
        on_failure_callback=FAILURE_NOTIFIERS,
        train_data=prepared["train_dir"],
        valid_data=prepared["valid"],
        lightgbm_params={
            "objective": prepared["objective"],
            "num_class": prepared["num_class"],
            "learning_rate": "{{ params.learning_rate }}",
            "num_leaves": 31,
            "seed": 0,
        },
        num_boost_round="{{ params.boost_rounds }}",
        num_workers=WORKERS,
        backend=BACKEND,
    )
    train_horovod = HorovodTrainingOperator(
        task_id="train_horovod",
        on_failure_callback=FAILURE_NOTIFIERS,
        command=[
            "python",
            "-m",
            "airflow_ml_provider.runtime.horovod_keras",
            "--epochs",
            "{{ params.epochs }}",
            "--learning-rate",
            "{{ params.learning_rate }}",
            "--train-data",
            prepared["train_dir"],
            "--test-data",
            prepared["valid"],
        ],
        num_workers=WORKERS,
        backend=BACKEND,
    )
    evaluate = EvaluateModelOperator(
        task_id="evaluate",
        training="train_{{ params.framework }}",  # the branch that ran
        test_data=prepared["test"],
        data_version=prepared["data_version"],
        backend=BACKEND,
        trigger_rule="none_failed_min_one_success",
    )
    preprocess >> choose_framework() >> [train_lightgbm, train_horovod] >> evaluate
    gate = ModelGateOperator(
        task_id="gate",
        notifiers=GATE_NOTIFIERS,
        evaluation=evaluate.output,
        model_name="{{ params.model_name }}",
        metric="{{ params.gate_metric }}",
        thresholds={"accuracy": "{{ params.min_accuracy }}", "auc": "{{ params.min_auc }}"},
        min_improvement="{{ params.min_improvement }}",
    )
    DeployModelOperator(
        task_id="deploy",
        model_name="{{ params.model_name }}",
        evaluation=evaluate.output,
        gate=gate.output,
        outlets=[MODEL],
        description="{{ params.notes }}",
    )
