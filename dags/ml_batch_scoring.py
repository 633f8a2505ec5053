"""Batch scoring, scheduled on the training pipeline's model Asset: whenever `ml_training_pipeline`
registers a version of the model this DAG scores with (`model_name`), this DAG runs and scores a batch
with exactly that version (named by the Asset event's extra), writing the predictions under the
artifact root, if the promotion gate passed that version: a version the gate rejected is registered
for the record but never scored with (the task log names it and why). A version of another model (a
variant such as `ml_training_pipeline.<experiment>`) is not scored with: the run is skipped, saying
which models the events were for.

Triggered by hand (no Asset event), it scores with `models:/<model_name>@champion`. The batch is
generated here (`rows` rows with the model's input width); point `score` at your own data instead.
The model is an MLflow pyfunc, loaded in this Airflow environment: LightGBM models work as they are;
a Keras model needs TensorFlow where this task runs.
"""

from __future__ import annotations

import hashlib

from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowSkipException

from airflow_ml_provider.assets import model_asset
from airflow_ml_provider.patterns import MODEL_NAME

MODEL = model_asset("ml_training_pipeline")


def _gate_passed(extra: dict) -> bool:
    """Whether the deploy that sent the event had its gate pass (events of older deploys: champion)."""
    return bool(extra.get("gate_passed", "champion" in extra.get("aliases", [])))

with DAG(
    dag_id="ml_batch_scoring",
    description="Scores a batch with each model version the training pipeline registers",
    schedule=[MODEL],
    catchup=False,
    tags=["ml", "example", "assets"],
    doc_md=__doc__,
    params={
        "model_name": Param(
            "ml_training_pipeline",
            type="string",
            pattern=MODEL_NAME,
            title="Model name",
            description="The registered model scored with: the newest version an Asset event names, "
                        "else (a run by hand) its champion. Events for other models are not scored with.",
        ),
        "rows": Param(1000, type="integer", minimum=1, maximum=1_000_000, title="Rows to score"),
    },
) as dag:

    @task(doc_md="The model version to score with: the newest triggering Asset event's for `model_name` whose "
                 "gate passed (rejected versions are named and skipped), "
                 "else its champion.")
    def choose_model(params: dict, triggering_asset_events=None) -> dict:
        import logging

        log = logging.getLogger("airflow.task")
        name = params["model_name"]
        events = list(triggering_asset_events[MODEL]) if triggering_asset_events else []
        if not events:
            log.info("Scoring with %s@champion: triggered by hand, the registry's champion", name)
            return {"model_name": name, "version": None, "model_uri": f"models:/{name}@champion", "trigger": "manual",
                    "why": "the champion"}
        ours = [event for event in events if (event.extra or {}).get("name") == name]
        if not ours:
            others = sorted({str((event.extra or {}).get("name")) for event in events})
            raise AirflowSkipException(f"the Asset events of this run are for {others}, not {name!r}: nothing to score")
        passed = [event for event in ours if _gate_passed(event.extra)]
        for event in ours:
            if event not in passed:
                log.info("Not scoring %s version %s: the promotion gate rejected it", name, event.extra.get("version"))
        if not passed:
            raise AirflowSkipException(f"no version of {name!r} in this run's Asset events passed its gate: nothing to score")
        # several events queued before this run (in no set order): the newest version that passed wins
        extra = max(passed, key=lambda event: event.timestamp).extra
        why = "the champion" if extra.get("promoted", True) else "it passed its gate (a reviewer kept the champion)"
        log.info("Scoring with %s version %s: %s", name, extra["version"], why)
        return {
            "model_name": name,
            "version": extra["version"],
            "model_uri": f"models:/{extra['name']}/{extra['version']}",
            "trigger": f"asset event of DAG run {extra['run_id']}",
            "why": why,
            "metrics": extra.get("metrics", {}),
        }

    @task(doc_md="Scores a generated batch and writes `predictions.csv` under the artifact root, with "
                 "`lineage.json` naming the model version that scored it.")
    def score(model: dict, params: dict, run_id: str) -> dict:
        import json

        import numpy as np

        from airflow_ml_provider.hooks.model_registry import ModelRegistryHook
        from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
        from airflow_ml_provider.reporting.mlflow_output import mlflow_output_to_task_log

        # MLflow's output in the task log at its own level, minus its type-hint warning (the model has a signature)
        registry = ModelRegistryHook()
        if model.get("version") is None:  # by hand: the champion's number, resolved once, is what scores
            with mlflow_output_to_task_log():
                champion = registry.alias_version(model["model_name"], "champion")
            if champion is None:
                raise ValueError(f"model {model['model_name']!r} has no champion to score with")
            model = {**model, "version": champion["version"],
                     "model_uri": f"models:/{model['model_name']}/{champion['version']}"}
        with registry.mlflow() as mlflow, mlflow_output_to_task_log():
            loaded = mlflow.pyfunc.load_model(model["model_uri"])
            width = loaded.metadata.get_input_schema().inputs[0].shape[-1]
            batch = np.random.default_rng(0).normal(size=(params["rows"], width)).astype(np.float32)
            probabilities = np.asarray(loaded.predict(batch))
        labels = probabilities.argmax(axis=1) if probabilities.ndim == 2 else (probabilities > 0.5).astype(int)
        store = TrainingBackendHook().artifact_store()
        if store is None:
            raise ValueError("artifact_root: not configured for the training connection's cluster backend")
        where = ("predictions", dag.dag_id, hashlib.sha256(run_id.encode()).hexdigest()[:12])
        store.path(*where).mkdir(parents=True, exist_ok=True)
        with store.path(*where, "predictions.csv").open("w") as f:
            f.write("row,label\n")
            f.writelines(f"{i},{label}\n" for i, label in enumerate(labels.tolist()))
        scored_by = {"model_name": model["model_name"], "version": model["version"], "model_uri": model["model_uri"],
                     "dag_id": dag.dag_id, "run_id": run_id, "predictions": "predictions.csv"}
        with store.path(*where, "lineage.json").open("w") as f:  # which model version made these predictions
            json.dump(scored_by, f, indent=2)
        return {**model, "rows": len(labels), "predictions": store.url(*where, "predictions.csv"),
                "label_counts": {str(k): int(v) for k, v in zip(*np.unique(labels, return_counts=True))}}

    score(choose_model())
