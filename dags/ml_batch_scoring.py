"""Batch scoring, scheduled on the training pipeline's model Asset: whenever `ml_training_pipeline`
registers a version of the model this DAG scores with (`model_name`), this DAG runs and scores a batch
with exactly that version (named by the Asset event's extra), writing the predictions under the
artifact root, if the promotion gate passed that version: a version the gate rejected is registered
for the record but never scored with (the task log names it and why). A version of another model (a
variant such as `ml_training_pipeline.<experiment>`) is not scored with: the run is skipped, saying
which models the events were for.

Triggered by hand (no Asset event), it scores with `models:/<model_name>@champion`. What it scores is
`input`: a folder, object-storage prefix or glob of Parquet, CSV or NPZ files (a local one in the data roots),
one shard per file, scored by `workers` workers in one sharded job that commits each shard's predictions once
and, resubmitted, scores only the shards not done (docs/sharded.md). Left empty (the demo), a batch is
generated instead (`rows` rows with the model's input width).
The model is not loaded in this Airflow environment: `score` runs a job on the training backend, in the
environment of the framework that trained the model (a Horovod/Keras model: TensorFlow's), and its log says
which version it scores, why, and where the predictions went.
"""

from __future__ import annotations

from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowSkipException

from airflow_ml_provider.assets import model_asset
from airflow_ml_provider.operators.scoring import BatchScoringOperator
from airflow_ml_provider.patterns import MODEL_NAME, MODEL_NAME_WORDS, required

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
            **required("string", MODEL_NAME_WORDS, pattern=MODEL_NAME),
            title="Model name",
            description="The registered model scored with: the newest version an Asset event names, "
                        "else (a run by hand) its champion. Events for other models are not scored with.",
        ),
        "rows": Param(
            1000,
            title="Rows to score",
            description="How many rows of generated input the model scores (with the model's input width): a whole "
                        "number from 1 to 1000000.",
            **required("integer", "Rows to score: a whole number from 1 to 1000000.", minimum=1, maximum=1_000_000),
        ),
        "input": Param(
            "",
            type=["null", "string"],  # no "required" star; null (an emptied field) as "": a generated batch
            maxLength=4096,
            title="Input dataset",
            description="A folder, object-storage prefix (s3://...) or glob of .parquet, .csv or .npz files to score, "
                        "each file a shard; a local one lies in the data roots. Empty: a generated batch of `rows`.",
        ),
        "workers": Param(2, title="Workers", description="How many workers score the input's shards at once: 1 to 64.",
                         **required("integer", "Workers: a whole number from 1 to 64.", minimum=1, maximum=64)),
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

    BatchScoringOperator(
        task_id="score",
        doc_md="Scores the input dataset (or a generated batch) in a job where the model's framework loads (a Keras "
               "model: the Horovod environment, with TensorFlow): each shard's `predictions.parquet` and "
               "`lineage.json` (the version, the input file and its sha256) under the artifact root, committed "
               "once; the log says where.",
        model=choose_model(),
        rows="{{ params.rows }}",
        input="{{ params.input or '' }}",
        workers="{{ params.workers }}",
    )
