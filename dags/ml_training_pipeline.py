"""The production pipeline, without Airflow plumbing to write: preprocess -> train -> evaluate ->
gate -> deploy to the model marketplace (MLflow Model Registry) -> summary.

**Trigger it** with the defaults (a generated dataset, LightGBM on the connection's default backend,
the local one unless configured), or pick the Params: framework (LightGBM or Horovod), backend,
workers, epochs/rounds, learning rate, your own data, gate thresholds. The trigger form checks
types, ranges and choices; paths and names are checked by the server when you trigger (the
refusal names the Param), and whether `data_path` exists by the first task, `prepare_data`.
Values reach jobs as argv data only (no shell, no second template pass).

**What comes out**: the `summary` task's log and XCom say it in one place: held-out metrics, the
gate's verdict, the registered model version, with links to the MLflow run (plot, report) and
the model version. The `evaluate` and `deploy` tasks carry the same links ("MLflow ...").
"""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowFailException

from airflow_ml_provider.assets import data_asset, model_asset
from airflow_ml_provider.jobs.backends import BACKENDS
from airflow_ml_provider.operators.approval import ChampionApprovalOperator
from airflow_ml_provider.operators.deploy import DeployModelOperator
from airflow_ml_provider.operators.evaluate import EvaluateModelOperator
from airflow_ml_provider.operators.gate import ModelGateOperator
from airflow_ml_provider.operators.notify import FAILURE_MESSAGE, GATE_MESSAGE, pipeline_notifiers
from airflow_ml_provider.operators.preprocess import PreprocessOperator
from airflow_ml_provider.operators.training import HorovodTrainingOperator, LightGBMTrainingOperator
from airflow_ml_provider.patterns import whole

BACKEND = "{{ params.backend or '' }}"  # "" = the ml_training connection's default backend
IMAGE = "{{ params.image or '' }}"  # "" = the connection's image_<framework> / image (Kubernetes backends)
WORKERS = "{{ params.workers }}"
MODEL = model_asset("ml_training_pipeline")  # deploy's events schedule dags/ml_batch_scoring.py
DATA = data_asset("ml_training_pipeline")  # one event per preprocessed part of the data
# Who hears of failed trainings and gate rejections: [ml_training] notify_http_conn_id (a chat webhook), or
# put any Airflow notifier here, e.g. [SmtpNotifier(to="ml-team@example.com", ...)] or a SlackNotifier.
FAILURE_NOTIFIERS = pipeline_notifiers(FAILURE_MESSAGE)
GATE_NOTIFIERS = pipeline_notifiers(GATE_MESSAGE)
# The model names this DAG may write (model governance): its own name, or a variant of it
# ("ml_training_pipeline.<variant>") for experiments; the Param chooses among them, and the gate
# and deploy tasks refuse any other name, so a run can never touch another team's model.
MODEL_NAMES = ["ml_training_pipeline", "ml_training_pipeline.*"]
MODEL_NAME = whole(r"ml_training_pipeline(?:\.[A-Za-z0-9_-]{1,60})?")


DATA_PATH = whole(r"/(?!.*\.\.)[A-Za-z0-9_./-]+\.(?:npz|csv)")
# A container image reference: [registry[:port]/]path[:tag][@sha256:digest]; never a local path.
IMAGE_REF = whole(
    r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]{1,5})?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?"
)


def check_params(params: dict) -> None:
    """What the trigger form's JSON schema cannot say: the data file exists (here, where the run
    reads it) and the learning rate is a number (JSON-schema bounds let NaN through). Fails the run
    at its first task, for good, naming each refused Param."""
    problems = []
    if not math.isfinite(float(params["learning_rate"])):
        problems.append(f"learning_rate: {params['learning_rate']!r} is not a finite number")
    if params.get("data_path") and not Path(params["data_path"]).is_file():
        problems.append(f"data_path: {params['data_path']!r} is not a file the Airflow worker can read")
    if problems:
        raise AirflowFailException("Params refused: " + "; ".join(problems))


def data_part(output_path: str) -> str:
    """The name of a preprocessing input in the UI: ``shard 0``, ``shard 1``, ..., ``valid``, ``test``."""
    split, name = output_path.rstrip("/").split("/")[-2:]
    return f"shard {int(name.split('-')[-1].split('.')[0])}" if split == "train" else split


with DAG(
    dag_id="ml_training_pipeline",
    description="Preprocess, train (LightGBM or Horovod), evaluate, gate and register a model in MLflow",
    schedule=None,
    catchup=False,
    tags=["ml", "pipeline", "example"],
    doc_md=__doc__,
    user_defined_filters={"data_part": data_part},
    params={
        "framework": Param(
            "lightgbm",
            type="string",
            enum=["lightgbm", "horovod"],
            values_display={"lightgbm": "LightGBM (data-parallel)", "horovod": "Horovod (TensorFlow/Keras)"},
            title="Framework",
            description="Which trainer runs: LightGBM gradient boosting or a Horovod/Keras network.",
        ),
        "backend": Param(
            None,
            type=["null", "string"],
            enum=[None, *sorted(BACKENDS)],
            values_display={"null": "default: the ml_training connection's backend (local)"},
            title="Backend",
            description="Where the jobs run; empty: the ml_training connection's default backend.",
        ),
        "image": Param(
            None,
            type=["null", "string"],
            pattern=IMAGE_REF,
            maxLength=512,
            title="Training image",
            description="Kubernetes backends: the container image of every job; empty: the ml_training "
            "connection's image_<framework> or image extra. The local backend uses its own environment.",
        ),
        "workers": Param(
            2,
            type="integer",
            minimum=1,
            maximum=64,
            title="Workers",
            description="Workers of the training job.",
        ),
        "epochs": Param(
            3, type="integer", minimum=1, maximum=500, title="Epochs", description="Horovod only: epochs."
        ),
        "boost_rounds": Param(
            60,
            type="integer",
            minimum=1,
            maximum=10_000,
            title="Boosting rounds",
            description="LightGBM only: boosting rounds.",
        ),
        "learning_rate": Param(
            0.05,
            type="number",
            exclusiveMinimum=0,
            maximum=1,
            title="Learning rate",
            description="Step size, above 0 and at most 1.",
        ),
        "data_path": Param(
            None,
            type=["null", "string"],
            pattern=DATA_PATH,
            maxLength=4096,
            title="Dataset",
            description="Absolute path of an .npz (X, y) or .csv (a label column) file on the Airflow worker; "
            "empty: a generated binary classification set.",
        ),
        "shards": Param(
            2,
            type="integer",
            minimum=1,
            maximum=64,
            title="Shards",
            description="Preprocessing jobs for the training data.",
        ),
        "model_name": Param(
            "ml_training_pipeline",
            type="string",
            pattern=MODEL_NAME,
            title="Model name",
            description="Registered model: ml_training_pipeline, or a variant of it for experiments "
            "(ml_training_pipeline.<variant>: letters, digits, '_', '-'). This DAG writes no other model.",
        ),
        "gate_metric": Param(
            "accuracy",
            type="string",
            enum=["accuracy", "auc", "f1", "log_loss"],
            title="Gate metric",
            description="The metric on which the new model must beat the champion.",
        ),
        "min_improvement": Param(
            0.0,
            type="number",
            minimum=0,
            maximum=1,
            title="Minimum improvement",
            description="How much better than the champion the gate metric must be (0: at least as good).",
        ),
        "min_accuracy": Param(
            0.7,
            type="number",
            minimum=0,
            maximum=1,
            title="Minimum accuracy",
            description="Gate: held-out accuracy.",
        ),
        "min_auc": Param(
            0.0,
            type="number",
            minimum=0,
            maximum=1,
            title="Minimum ROC AUC",
            description="Gate: held-out ROC AUC.",
        ),
        "require_approval": Param(
            False,
            type="boolean",
            title="Require approval",
            description="Ask a person (Required Actions page) before a model that passed the gate becomes champion.",
        ),
        "notes": Param(
            None,
            type=["null", "string"],
            maxLength=500,
            title="Notes",
            description="Free text stored as the model version's description (data, never run).",
        ),
    },
) as dag:

    @task(
        doc_md="Checks the Params, then splits the dataset into training shards, a validation and a test set."
    )
    def prepare_data(params: dict, run_id: str, ti=None) -> list[dict]:
        """Split the dataset (or a generated one) into shards and held-out sets; only paths go to XCom:
        the shards to preprocess are the return value (mapped over), the rest have their own keys."""
        from airflow_ml_provider.hooks.artifacts import run_data_dir
        from airflow_ml_provider.runtime.datasets import write_synthetic
        from airflow_ml_provider.runtime.splits import split_dataset

        check_params(params)
        out = run_data_dir("ml_training_pipeline", run_id, params["backend"])  # under artifact_root
        source = params["data_path"]
        if not source:
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

    @task.branch(doc_md="Picks the training task of the `framework` Param.")
    def choose_framework(params: dict) -> str:
        return f"train_{params['framework']}"

    prepared = prepare_data()
    preprocess = PreprocessOperator.partial(
        task_id="preprocess",
        outlets=[DATA],
        data_version=prepared["data_version"],
        backend=BACKEND,
        image=IMAGE,
        map_index_template="{{ task.output_path | data_part }}",
        doc_md="One job per part of the data (`shard 0..N`, `valid`, `test`): drop non-finite rows, clip, float32.",
    ).expand_kwargs(prepared)
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
        image=IMAGE,
        doc_md="Data-parallel LightGBM over the preprocessed shards, one worker per machine.",
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
        image=IMAGE,
        doc_md="Horovod (ring-allreduce) training of a Keras network over the preprocessed shards.",
    )
    evaluate = EvaluateModelOperator(
        task_id="evaluate",
        training="train_{{ params.framework }}",  # the branch that ran
        test_data=prepared["test"],
        data_version=prepared["data_version"],
        model_name="{{ params.model_name }}",  # its champion is scored on the same rows
        model_names=MODEL_NAMES,
        backend=BACKEND,
        image=IMAGE,
        trigger_rule="none_failed_min_one_success",
        doc_md="Held-out metrics, training curve and report, recorded as an MLflow run (see its link).",
    )
    preprocess >> choose_framework() >> [train_lightgbm, train_horovod] >> evaluate
    gate = ModelGateOperator(
        task_id="gate",
        notifiers=GATE_NOTIFIERS,
        evaluation=evaluate.output,
        model_name="{{ params.model_name }}",
        model_names=MODEL_NAMES,
        metric="{{ params.gate_metric }}",
        thresholds={"accuracy": "{{ params.min_accuracy }}", "auc": "{{ params.min_auc }}"},
        min_improvement="{{ params.min_improvement }}",
        doc_md="Thresholds and champion comparison; a rejection is a normal outcome (the model stays challenger).",
    )
    approve = ChampionApprovalOperator(
        task_id="approve",
        gate=gate.output,
        evaluation=evaluate.output,
        model_name="{{ params.model_name }}",
        require_approval="{{ params.require_approval }}",
        response_timeout=timedelta(days=7),  # then the default, Reject: the model stays challenger
        doc_md="With `require_approval`: a person approves (or rejects) the promotion; otherwise returns at once.",
    )
    deploy = DeployModelOperator(
        task_id="deploy",
        model_name="{{ params.model_name }}",
        model_names=MODEL_NAMES,
        evaluation=evaluate.output,
        gate=gate.output,
        approval=approve.output,
        outlets=[MODEL],
        description="{{ params.notes or '' }}",
        doc_md="Registers the model version; if the gate passed: alias `challenger`, and `champion` unless "
        "a reviewer rejected it. A rejected version gets no alias.",
    )

    @task(doc_md="What came out of this run: metrics, the gate's verdict, the approval, the model version, links.")
    def summary(evaluation: dict, verdict: dict, deployed: dict, approval: dict) -> dict:
        from airflow_ml_provider.operators.summary import log_run_summary

        return log_run_summary(evaluation, verdict, deployed, approval)

    summary(evaluate.output, gate.output, deploy.output, approve.output)
