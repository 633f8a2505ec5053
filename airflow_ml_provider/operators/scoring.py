"""Batch scoring with a registered model version, where the model's framework loads."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_ml_provider.artifact_layout import inputs_dir, join
from airflow_ml_provider.hooks.model_registry import CHAMPION, TRAINED_BY, ModelRegistryHook
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import Framework
from airflow_ml_provider.operators import sharding as sharded
from airflow_ml_provider.operators.base_job import BaseJobOperator
from airflow_ml_provider.operators.config import JobRequest
from airflow_ml_provider.operators.links import MLflowModelVersionLink, job_links
from airflow_ml_provider.reporting.mlflow_output import mlflow_output_to_task_log
from airflow_ml_provider.runtime.score import PREDICTIONS


class BatchScoringOperator(BaseJobOperator):
    """Scores a dataset, or a generated batch, with one registered model version in a job (``runtime.score``)
    that runs in the image of the framework that trained the model, chosen by its model file (``model.keras``:
    Horovod's, which has TensorFlow; ``model.txt``: LightGBM's; ``model.pt``: PyTorch's; locally: the training
    environment). The Airflow worker never loads the model; the task log says where the predictions went, and
    links the version.

    With ``input`` (a folder, object-storage prefix or glob of Parquet, CSV or NPZ files; a local one in the
    data roots), the job is sharded (:doc:`sharded`): ``files_per_shard`` files a shard, ``workers`` workers,
    each shard's ``predictions.parquet`` and ``lineage.json`` (the version, each input file and its sha256)
    committed once under ``<model_dir>/shards/shard-<i>``; a resubmitted job scores only the shards not done.
    Without it, a one-worker job scores ``rows`` generated rows (the demo) into ``predictions.csv``. Either way
    the job's model directory gets ``lineage.json`` (the version that scored).

    Args:
        model: ``{"model_name", "version"}`` (``version`` None: the ``champion`` alias's, resolved once);
            other keys (``why``, ``trigger``) are passed through to the result. Templated (an XComArg).
        rows: rows in the generated batch (without ``input``).
        input: the dataset to score (templated; empty: the generated batch).
        workers: the sharded job's workers (templated).
        sharding: ``files_per_shard`` (default 1), ``id_column`` (default ``id``), ``max_attempts``,
            ``max_failed_shards`` (see ``jobs.shards.ShardPlan``).
        registry_conn_id: the model registry (MLflow) connection.
        job, follow, on_finish, ml_conn_id, elasticsearch_conn_id, deferrable: see
            :class:`~airflow_ml_provider.operators.base_job.BaseJobOperator`.

    Returns (XCom): ``model`` plus ``{"version", "model_uri", "framework", "rows", "label_counts",
    "predictions", "url", "job_name", "backend"}`` (``url``: the version in the MLflow UI, or empty); with
    ``input`` also ``input`` and ``shards`` (the job's result: shards done, ran, skipped, failed).
    """

    template_fields: Sequence[str] = (*BaseJobOperator.template_fields, "model", "rows", "input", "workers")
    operator_extra_links = (*job_links(), MLflowModelVersionLink())
    ui_color = "#d5f5e3"

    def __init__(self, *, model: dict[str, Any] | Any, rows: int | str = 1000, input: str | None = None,
                 workers: int | str = 1, sharding: dict[str, Any] | None = None,
                 registry_conn_id: str = ModelRegistryHook.default_conn_name, **kwargs: Any):
        super().__init__(**kwargs)
        self.model = model
        self.rows = rows
        self.input = input
        self.workers = workers
        self.sharding = sharded.checked_options(self.task_id, sharding, own=_SHARDING)
        self.registry_conn_id = registry_conn_id
        self._identity: JobIdentity | None = None
        self._placed: dict[str, Any] | None = None  # the version, its file in the job's directory, its width

    def render_template_fields(self, context, jinja_env=None) -> None:
        self._identity = JobIdentity.from_context(context)
        super().render_template_fields(context, jinja_env)

    def job_request(self) -> JobRequest:
        placed = self._place()
        command = ["python", "-m", "airflow_ml_provider.runtime.score", "--model", placed["location"],
                   "--features", str(placed["features"])]
        if not self.input:
            return JobRequest(Framework.GENERIC, [*command, "--rows", str(int(self.rows))], image_of=placed["image_of"],
                              inputs=[placed["location"]])
        from airflow_ml_provider.operators.dataset import dataset_files, folder

        try:
            files = dataset_files(self.input, self.runner.hook.data_roots())
        except ValueError as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}") from None
        workers = sharded.workers(self.task_id, self.workers)
        per = int(self.sharding.get("files_per_shard", 1))
        groups = [files[i:i + per] for i in range(0, len(files), max(per, 1))]
        lineage = {"model_name": self.model["model_name"], "version": placed["version"],
                   "model_uri": f"models:/{self.model['model_name']}/{placed['version']}"}
        command += ["--shards", "--lineage", json.dumps(lineage), "--id-column", self.sharding.get("id_column", "id")]
        return JobRequest(Framework.GENERIC, command, num_workers=workers, image_of=placed["image_of"],
                          inputs=[placed["location"], folder(self.input)], shards=sharded.plan(groups, self.sharding))

    def _place(self) -> dict[str, Any]:
        """Once per try: the version (the champion's number when none is named), checked against its recorded
        sha256 and copied beside this job's directory (``inputs_dir``), where the job reads it."""
        if self._placed is not None:
            return self._placed
        if self._identity is None:
            raise AirflowFailException(f"{self.task_id}: the model version is placed when the task runs")
        name, version = self.model["model_name"], self.model.get("version")
        registry = ModelRegistryHook(self.registry_conn_id)
        job_dir, store = self.runner.job_dir(self._identity.name), self.runner.setup.store
        if not job_dir or store is None:
            raise AirflowFailException(f"{self.task_id}: no artifact root to hand the model to the scoring job")
        with mlflow_output_to_task_log():
            if version is None:
                held = registry.alias_version(name, CHAMPION)
                if held is None:
                    raise AirflowFailException(f"{self.task_id}: model {name!r} has no champion to score with")
                version = held["version"]
            location = registry.place_model_file(name, version, store, join(inputs_dir(job_dir), "scored-model"))
            features = registry.input_width(name, version)
        image_of = TRAINED_BY[PurePosixPath(location).suffix]
        self.log.info("Model %s version %s (%s) is scored in a job on the %s environment: %s", name, version,
                      PurePosixPath(location).name, image_of, self.model.get("why") or "as asked")
        self._placed = {"version": version, "location": location, "features": features, "image_of": image_of}
        return self._placed

    def finish(self, context, job: dict[str, Any]) -> dict[str, Any]:
        """Write ``lineage.json`` beside the predictions, say where they are and link the version."""
        ti, placed, name = context["ti"], self._placed, self.model["model_name"]
        spec, store, metrics = self.runner.spec, self.runner.setup.store, job["metrics"]
        uri = f"models:/{name}/{placed['version']}"
        predictions = spec.shards.output if spec.shards else join(spec.model_dir, PREDICTIONS)
        lineage = {"model_name": name, "version": placed["version"], "model_uri": uri, "dag_id": ti.dag_id,
                   "run_id": ti.run_id,  # where the predictions are, beside it
                   "predictions": PurePosixPath(predictions).relative_to(spec.model_dir).as_posix()}
        shards = sharded.result(metrics) if spec.shards else None
        if shards:
            lineage |= {"input": self.input, "shards": shards}
        with store.locate(join(spec.model_dir, "lineage.json")).open("w") as f:
            json.dump(lineage, f, indent=2)
        rows = metrics.get("rows")
        self.log.info("Scored %s rows with %s version %s: predictions at %s (lineage.json in %s)",
                      rows, name, placed["version"], predictions, spec.model_dir)
        with mlflow_output_to_task_log():
            url = ModelRegistryHook(self.registry_conn_id).version_url(name, placed["version"])
        return {**self.model, "version": placed["version"], "model_uri": uri, "framework": placed["image_of"],
                "rows": rows, "label_counts": metrics.get("label_counts", {}), "predictions": predictions,
                "url": url, "job_name": job["job_name"], "backend": job["backend"],
                **({"input": self.input, "shards": shards} if shards else {})}


_SHARDING = ("files_per_shard", "id_column")  # its own, beside the plan's (operators.sharding.OPTIONS)
