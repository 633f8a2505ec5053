"""The production pipeline, without Airflow plumbing to write: preprocess -> train -> evaluate ->
gate -> deploy to the model marketplace (MLflow Model Registry) -> summary.

**Trigger it** with the defaults (a generated dataset, LightGBM on the connection's default backend,
the local one unless configured), or pick the Params: framework (LightGBM, XGBoost, Horovod or PyTorch), backend,
workers, epochs/rounds, learning rate, your own data, gate thresholds, and on Kubernetes the nodes the
training job runs on (a spot pool's node selector and tolerations). The trigger form checks
types and choices; ranges and names are checked by the server when you press Trigger (the refusal
names the Param and its range); the first task, `prepare_data`, checks what a form cannot: `data_path` must be a file inside
the data roots, `image` an absolute path (local backend) or a registry reference (Kubernetes), and
the node selector and tolerations Kubernetes label syntax and Kubernetes' operators and effects, and
trigger-conf keys must name Params ("Params refused: <Param>: ...").
Values reach jobs as argv data only (no shell, no second template pass).

**Preprocessing** is one sharded job, not one task per part: `prepare_data` splits the data into the `shards`
training parts, a validation and a test set, and the `preprocess` task runs every part as one job on `workers`
workers, each part committed once under the run's `processed/shard-<i>/` (a retry, or the run cleared, re-runs only
the parts not committed). The trainers read the training parts' outputs (`processed/shard-*/train-*.npz`),
evaluation the test part's; the data Asset's event lists every part (input, output, rows, sha256).

**What comes out**: the `summary` task's log and XCom say it in one place: held-out metrics, the
gate's verdict, the registered model version, with links to the MLflow run (plot, report) and
the model version. The `evaluate` and `deploy` tasks carry the same links ("MLflow ...").
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param, task

from airflow_ml_provider.assets import data_asset, model_asset
from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.jobs.backends import BACKENDS
from airflow_ml_provider.operators.approval import ChampionApprovalOperator
from airflow_ml_provider.operators.deploy import DeployModelOperator
from airflow_ml_provider.operators.evaluate import EvaluateModelOperator
from airflow_ml_provider.operators.gate import ModelGateOperator
from airflow_ml_provider.operators.params import (
    conf_problems,
    data_file,
    describe,
    image_problems,
    number_problems,
    placement,
    refuse,
)
from airflow_ml_provider.operators.preprocess import PreprocessOperator
from airflow_ml_provider.operators.training import (
    HorovodTrainingOperator,
    LightGBMTrainingOperator,
    PyTorchTrainingOperator,
    XGBoostTrainingOperator,
)
from airflow_ml_provider.patterns import required, whole
from airflow_ml_provider.reporting.notify import FAILURE_MESSAGE, GATE_MESSAGE, pipeline_notifiers

BACKEND = "{{ params.backend or '' }}"  # "" = the ml_training connection's default backend
IMAGE = "{{ params.image or '' }}"  # "" = the connection's image_<framework> / image (Kubernetes backends)
WORKERS = "{{ params.workers }}"
JOB = {"backend": BACKEND, "image": IMAGE}  # every job's JobConfig, as a dict (its strings are templated)
MODEL = model_asset("ml_training_pipeline")  # deploy's events schedule dags/ml_batch_scoring.py
DATA = data_asset("ml_training_pipeline")  # one event per preprocessing: every part listed
# Who hears of failed trainings and gate rejections: [ml_training] notify_http_conn_id (a chat webhook), or
# put any Airflow notifier here, e.g. [SmtpNotifier(to="ml-team@example.com", ...)] or a SlackNotifier.
FAILURE_NOTIFIERS = pipeline_notifiers(FAILURE_MESSAGE)
GATE_NOTIFIERS = pipeline_notifiers(GATE_MESSAGE)
# The model names this DAG may write (model governance): its own name, or a variant of it
# ("ml_training_pipeline.<variant>") for experiments; the Param chooses among them, and the gate
# and deploy tasks refuse any other name, so a run can never touch another team's model.
MODEL_NAMES = ["ml_training_pipeline", "ml_training_pipeline.*"]
MODEL_NAME = whole(r"ml_training_pipeline(?:\.[A-Za-z0-9_-]{1,60})?")



def check_params(params: dict, run_conf: dict | None = None) -> str | None:
    """What Airflow's Param validation lets through, checked by the first task: trigger-conf keys that
    name no Param (and the conf's size), numbers that are NaN (null after JSON) or integers written as
    ``5.0``, an image that is a relative path, a data file outside the data roots or missing, a node
    selector or toleration Kubernetes would refuse. Fails the
    run for good, naming each refused Param; returns the data file's resolved path (None: generate)."""
    hook = TrainingBackendHook()
    declared = dag.params
    problems = conf_problems(run_conf, declared) + number_problems(params, declared)
    backend = hook.backend_name(params.get("backend"))
    problems += image_problems("image", params.get("image"), backend, describe(declared.get_param("image")),
                               hook.local_images() if backend == "local" else ())
    problems += placement(params, declared)[1]
    data = None
    if params.get("data_path"):
        data, found = data_file("data_path", params["data_path"], hook.data_roots(),
                                describe(declared.get_param("data_path")))
        problems += found
    refuse(problems)
    return data


with DAG(
    dag_id="ml_training_pipeline",
    description="Preprocess, train (LightGBM or Horovod), evaluate, gate and register a model in MLflow",
    schedule=None,
    catchup=False,
    tags=["ml", "pipeline", "example"],
    doc_md=__doc__,
    params={
        "framework": Param(
            "lightgbm",
            type=["null", "string"],  # no "required" star (a valid default); null is not in the enum: refused
            enum=["lightgbm", "xgboost", "horovod", "pytorch"],
            values_display={"lightgbm": "LightGBM (data-parallel)", "xgboost": "XGBoost (distributed hist)",
                            "horovod": "Horovod (TensorFlow/Keras)", "pytorch": "PyTorch (DDP under torchrun)"},
            title="Framework",
            description="Which trainer runs: LightGBM or XGBoost gradient boosting, a Horovod/Keras network or a "
            "PyTorch DDP network.",
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
            maxLength=512,
            title="Training image",
            description="Kubernetes backends: the container image of every job, a registry reference such as "
            "registry.example.com/team/train:1.2; local backend: the absolute path of one of the deployment's "
            "Python environments ([ml_training] local_images). "
            "Empty: the ml_training connection's image_<framework> or image extra (local: its own environment).",
        ),
        "workers": Param(
            2,
            **required("integer", "Workers: a whole number from 1 to 64.", minimum=1, maximum=64),
            title="Workers",
            description="Workers of the training job: a whole number from 1 to 64.",
        ),
        "epochs": Param(
            3,
            **required("integer", "Epochs: a whole number from 1 to 500.", minimum=1, maximum=500),
            title="Epochs",
            description="Horovod and PyTorch: epochs, a whole number from 1 to 500.",
        ),
        "boost_rounds": Param(
            60,
            **required("integer", "Boosting rounds: a whole number from 1 to 10000.", minimum=1, maximum=10_000),
            title="Boosting rounds",
            description="LightGBM and XGBoost only: boosting rounds, a whole number from 1 to 10000.",
        ),
        "learning_rate": Param(
            0.05,
            **required("number", "Learning rate: above 0 and at most 1.", exclusiveMinimum=0, maximum=1),
            title="Learning rate",
            description="Step size, above 0 and at most 1.",
        ),
        "data_path": Param(
            None,
            type=["null", "string"],
            maxLength=4096,
            title="Dataset",
            description="Absolute path of an .npz (X, y) or .csv (a label column) file on the Airflow worker, "
            "inside the data roots ([ml_training] data_roots; by default $AIRFLOW_HOME/data and the runs' "
            "data folder); empty: a generated binary classification set.",
        ),
        "shards": Param(
            2,
            **required("integer", "Shards: a whole number from 1 to 64.", minimum=1, maximum=64),
            title="Shards",
            description="Parts of the training data (each one shard of the preprocessing job): a whole number from "
            "1 to 64.",
        ),
        "model_name": Param(
            "ml_training_pipeline",
            **required("string", "Model name: ml_training_pipeline[.<variant>]", pattern=MODEL_NAME),
            title="Model name",
            description="Registered model: ml_training_pipeline, or a variant of it for experiments "
            "(ml_training_pipeline.<variant>: letters, digits, '_', '-'). This DAG writes no other model.",
        ),
        "gate_metric": Param(
            "accuracy",
            type=["null", "string"],
            enum=["accuracy", "auc", "f1", "log_loss"],
            title="Gate metric",
            description="The metric on which the new model must beat the champion.",
        ),
        "min_improvement": Param(
            0.0,
            **required("number", "Minimum improvement: from 0 to 1.", minimum=0, maximum=1),
            title="Minimum improvement",
            description="How much better than the champion the gate metric must be (0: at least as good).",
        ),
        "min_accuracy": Param(
            0.7,
            **required("number", "Minimum accuracy: from 0 to 1.", minimum=0, maximum=1),
            title="Minimum accuracy",
            description="Gate: held-out accuracy.",
        ),
        "min_auc": Param(
            0.0,
            **required("number", "Minimum ROC AUC: from 0 to 1.", minimum=0, maximum=1),
            title="Minimum ROC AUC",
            description="Gate: held-out ROC AUC.",
        ),
        "require_approval": Param(
            False,
            **required("boolean", "Require approval: on or off."),
            title="Require approval",
            description="Ask a person (Required Actions page) before a model that passed the gate becomes champion.",
        ),
        "node_selector": Param(
            {},
            type=["null", "object"],  # null (an emptied field): none
            maxProperties=32,
            additionalProperties={"type": "string", "maxLength": 63},
            title="Node selector",
            description="Kubernetes backends: node labels the training job's pods require, e.g. a spot pool's "
            '{"cloud.google.com/gke-spot": "true"}: up to 32 labels, keys and values as Kubernetes labels. '
            "Empty: any node.",
        ),
        "tolerations": Param(
            [],
            type=["null", "array"],  # null (an emptied field): none
            maxItems=32,
            items={"type": "object", "additionalProperties": False, "properties": {
                "key": {"type": "string", "maxLength": 317}, "operator": {"enum": ["Exists", "Equal"]},
                "value": {"type": "string", "maxLength": 63},
                "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
                "toleration_seconds": {"type": "integer", "minimum": 0, "maximum": 604800}}},
            title="Tolerations",
            description="Kubernetes backends: taints the training job's pods tolerate, e.g. a spot pool's "
            '[{"key": "cloud.google.com/gke-spot", "operator": "Exists", "effect": "NoSchedule"}]: up to 32, '
            "operator Exists or Equal, effect NoSchedule, PreferNoSchedule or NoExecute, toleration_seconds "
            "(NoExecute only) up to 7 days. Empty: none.",
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
        doc_md="Checks the Params, then splits the dataset into training parts, a validation and a test set."
    )
    def prepare_data(params: dict, run_id: str, ti=None, dag_run=None) -> list[str]:
        """Split the dataset (or a generated one) into parts and held-out sets; only paths go to XCom: the
        parts to preprocess are the return value (one sharded job's inputs), the rest have their own keys
        (``processed``: where the job commits them; ``train``: the glob of the train parts' outputs)."""
        from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
        from airflow_ml_provider.runtime.datasets import write_synthetic
        from airflow_ml_provider.runtime.splits import split_dataset

        source = check_params(params, dag_run.conf)  # the data file, resolved inside the data roots
        ti.xcom_push("kubernetes", placement(params, dag.params)[0])  # the training job's nodes, checked
        out = TrainingBackendHook().run_data_dir("ml_training_pipeline", run_id, params["backend"])  # under artifact_root
        if not source:
            source = out / "source.npz"
            write_synthetic(source, rows=20_000, features=20, seed=0)
        split = split_dataset(source, out, params["shards"])
        classes = split.pop("n_classes")
        split.update(
            objective="binary" if classes <= 2 else "multiclass", num_class=1 if classes <= 2 else classes
        )
        for key, value in split.items():
            if key != "inputs":
                ti.xcom_push(key, value)
        return split["inputs"]

    @task.branch(doc_md="Picks the training task of the `framework` Param.")
    def choose_framework(params: dict) -> str:
        return f"train_{params['framework']}"

    prepared = prepare_data()
    TRAINING_JOB = {**JOB, "kubernetes": prepared["kubernetes"]}  # placed on the nodes the Params chose
    preprocess = PreprocessOperator(
        task_id="preprocess",
        outlets=[DATA],
        inputs=prepared,  # every part: the training parts, then the test and validation sets
        output_dir=prepared["processed"],
        workers=WORKERS,
        data_version=prepared["data_version"],
        job=JOB,
        doc_md="ONE sharded job over every part of the data (the `shards` training parts, the validation and test "
        "sets) on `workers` workers: drop non-finite rows, clip, float32. Each part is committed once; a retry "
        "re-runs only the parts not committed.",
    )
    train_lightgbm = LightGBMTrainingOperator(
        task_id="train_lightgbm",
        on_failure_callback=FAILURE_NOTIFIERS,
        train_data=prepared["train"],
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
        job=TRAINING_JOB,
        doc_md="Data-parallel LightGBM over the preprocessed shards, one worker per machine.",
    )
    train_xgboost = XGBoostTrainingOperator(
        task_id="train_xgboost",
        on_failure_callback=FAILURE_NOTIFIERS,
        train_data=prepared["train"],
        valid_data=prepared["valid"],
        xgboost_params={
            # prepare_data's objective, in XGBoost's words (a binary model predicts P(class 1), a multiclass one
            # every class's probability, as evaluation reads them)
            "objective": "{{ 'binary:logistic' if ti.xcom_pull(task_ids='prepare_data', key='objective') == 'binary'"
                         " else 'multi:softprob' }}",
            "num_class": prepared["num_class"],
            "eta": "{{ params.learning_rate }}",
            "max_depth": 6,
            "seed": 0,
        },
        num_boost_round="{{ params.boost_rounds }}",
        num_workers=WORKERS,
        job=TRAINING_JOB,
        doc_md="Distributed XGBoost (hist, its tracker started by the job) over the preprocessed shards.",
    )
    def network_trainer(module: str) -> list:
        """The argv of a bundled network trainer (Keras under Horovod, PyTorch DDP) over the prepared shards."""
        return ["python", "-m", f"airflow_ml_provider.runtime.{module}", "--epochs", "{{ params.epochs }}",
                "--learning-rate", "{{ params.learning_rate }}", "--train-data", prepared["train"],
                "--test-data", prepared["valid"]]

    train_horovod = HorovodTrainingOperator(
        task_id="train_horovod",
        on_failure_callback=FAILURE_NOTIFIERS,
        command=network_trainer("horovod_keras"),
        num_workers=WORKERS,
        job=TRAINING_JOB,
        doc_md="Horovod (ring-allreduce) training of a Keras network over the preprocessed shards.",
    )
    train_pytorch = PyTorchTrainingOperator(
        task_id="train_pytorch",
        on_failure_callback=FAILURE_NOTIFIERS,
        command=network_trainer("torch_ddp"),
        num_workers=WORKERS,
        job=TRAINING_JOB,
        doc_md="PyTorch DDP (torchrun, gloo on CPU) training of a network over the preprocessed shards.",
    )
    evaluate = EvaluateModelOperator(
        task_id="evaluate",
        training="train_{{ params.framework }}",  # the branch that ran
        test_data=prepared["test"],
        data_version=prepared["data_version"],
        model_name="{{ params.model_name }}",  # its champion is scored on the same rows
        model_names=MODEL_NAMES,
        job=JOB,
        trigger_rule="none_failed_min_one_success",
        doc_md="Held-out metrics, training curve and report, recorded as an MLflow run (see its link).",
    )
    preprocess >> choose_framework() >> [train_lightgbm, train_xgboost, train_horovod, train_pytorch] >> evaluate
    gate = ModelGateOperator(
        task_id="gate",
        notifiers=GATE_NOTIFIERS,
        evaluation=evaluate.output,
        model_name="{{ params.model_name }}",
        model_names=MODEL_NAMES,
        metric="{{ params.gate_metric }}",
        thresholds={"accuracy": "{{ params.min_accuracy }}", "auc": "{{ params.min_auc }}"},
        min_improvement="{{ params.min_improvement }}",
        doc_md="Thresholds and champion comparison; a rejection ends this task skipped (the grid shows it), its log "
        "saying why: the model is registered without an alias.",
    )
    approve = ChampionApprovalOperator(
        task_id="approve",
        gate=gate.output,
        evaluation=evaluate.output,
        model_name="{{ params.model_name }}",
        require_approval="{{ params.require_approval }}",
        response_timeout=timedelta(days=7),  # then, unanswered: not approved (the model stays challenger)
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
        trigger_rule="none_failed_min_one_success",  # a rejected (skipped) gate: registered for the record
        doc_md="Registers the model version; if the gate passed: alias `challenger`, and `champion` unless "
        "a reviewer rejected it. A rejected version gets no alias.",
    )

    @task(doc_md="What came out of this run: metrics, the gate's verdict, the approval, the model version, links.",
          trigger_rule="none_failed_min_one_success")
    def summary(evaluation: dict, verdict: dict, deployed: dict, approval: dict) -> dict:
        from airflow_ml_provider.reporting.summary import log_run_summary

        return log_run_summary(evaluation, verdict, deployed, approval)

    summary(evaluate.output, gate.output, deploy.output, approve.output)
