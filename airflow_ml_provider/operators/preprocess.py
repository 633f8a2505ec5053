"""Preprocessing as a job: one sharded job over every part of the data, or one job for one part."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from typing import Any

from airflow_ml_provider import assets
from airflow_ml_provider.jobs.spec import Framework
from airflow_ml_provider.operators import sharding as sharded
from airflow_ml_provider.operators.base_job import BaseJobOperator
from airflow_ml_provider.operators.config import JobRequest

EVENT_PARTS = 1000  # parts listed in the asset event (each committed part's marker holds its lineage in any case)


class PreprocessOperator(BaseJobOperator):
    """Runs the preprocessing command on the task's backend, so the data is processed where it lives, in one of
    two forms:

    - **every part, one job** (``inputs`` and ``output_dir``): ONE sharded job (:doc:`sharded`), a shard per
      input file, ``workers`` workers that each take many parts in one process (``command + ["--shards"]``:
      ``runtime.shards.serve``). Part ``i`` is committed once, as ``<output_dir>/shard-<i>/<its input's file
      name>`` (``runtime.splits.part_location``); a resubmitted job (a retry after its launcher was killed, the task
      cleared) re-runs only the parts not committed. 10,000 parts are one task instance and one job, not 10,000
      of each. On a Kubernetes backend that runs no sharded job, the job runs on ``indexed-job`` (the same
      cluster and connection, no operator needed) once that backend runs them (``sharding_backend``);
    - **one part** (``input_path`` and ``output_path``): ``command + ["--input", input_path, "--output",
      output_path]`` as a one-worker job.

    Args:
        inputs: the files to preprocess, one part each (paths or URLs, never data); templated (an XComArg).
        output_dir: where the parts are committed; templated.
        workers: the sharded job's workers (templated).
        sharding: ``max_attempts``, ``max_failed_shards`` (see ``jobs.shards.ShardPlan``).
        input_path, output_path: the one part to read and where to write it; templated.
        command: the preprocessing argv before its arguments (default: ``runtime.preprocess``); templated.
        data_version: the source's content hash, recorded in the asset events; templated.
        job, follow, on_finish, ml_conn_id, elasticsearch_conn_id, deferrable: see
            :class:`~airflow_ml_provider.operators.base_job.BaseJobOperator`.

    Returns (XCom): the job summary (without ``model_path``: it trains nothing) plus, for every part,
    ``output_dir``, ``parts`` (their number) and ``shards`` (the job's result: shards done, ran, skipped,
    failed); for one part ``input`` and ``output`` (its ``result`` line, rows and content hash, in ``metrics``).

    Every Asset in ``outlets`` gets one event whose ``extra`` holds ``data_version``: for one part its ``input``,
    ``output``, ``rows`` and ``sha256``; for every part ``output_dir``, ``rows`` and ``parts``, each part's
    ``input``, ``output``, ``rows`` and ``sha256`` (read from the parts' commit markers, whichever attempt of the
    job committed them: the first ``EVENT_PARTS``; ``parts_total`` says how many there are; ``rows`` is theirs). One event with every part listed, not one per
    part: one task emits one event per Asset through its outlets (Airflow's ``outlet_events[asset].extra``), and
    the parts of one run are one version of the data, which a consumer should see once; one event per part
    would need an AssetAlias and add a metadata-DB row and a consumer-queue check per part, the load that one job
    instead of one mapped task per part removes.
    """

    template_fields: Sequence[str] = ("command", "input_path", "output_path", "inputs", "output_dir", "workers",
                                      "data_version", *BaseJobOperator.template_fields)
    ui_color = "#d5f5e3"

    def __init__(self, *, inputs: list[str] | Any = None, output_dir: str | None = None, workers: int | str = 1,
                 sharding: dict[str, Any] | None = None, input_path: str | None = None,
                 output_path: str | None = None, command: list[str] | None = None, data_version: str | None = None,
                 **kwargs: Any):
        super().__init__(**kwargs)
        given = [value for value in (inputs, output_dir, input_path, output_path) if value is not None]
        if len(given) != 2 or (inputs is None or not output_dir) == (not input_path or not output_path):
            raise ValueError(f"{self.task_id}: give inputs and output_dir (every part, one sharded job) or input_path "
                             "and output_path (one part)")
        self.command = command or ["python", "-m", "airflow_ml_provider.runtime.preprocess"]
        self.inputs, self.output_dir, self.workers = inputs, output_dir, workers
        self.sharding = sharded.checked_options(self.task_id, sharding)
        self.input_path = input_path
        self.output_path = output_path
        self.data_version = data_version

    @property
    def every_part(self) -> bool:
        return self.output_dir is not None

    def make_runner(self):
        """Every part's job runs where sharded jobs run (``sharding_backend`` of the task's backend)."""
        if self.every_part:
            from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
            from airflow_ml_provider.jobs.backends import sharding_backend

            chosen = TrainingBackendHook(self.ml_conn_id).backend_name(self.job.get("backend") or None)
            if (runs := sharding_backend(chosen)) != chosen:
                self.log.info("Backend %s runs no sharded job: the preprocessing job runs on %s", chosen, runs)
                self.job = {**self.job, "backend": runs}
        return super().make_runner()

    def job_request(self) -> JobRequest:
        if not self.every_part:
            return JobRequest(Framework.GENERIC,
                              [*self.command, "--input", self.input_path, "--output", self.output_path],
                              output_dirs=[posixpath.dirname(self.output_path)])
        inputs = self.inputs
        if not isinstance(inputs, list) or not inputs or not all(isinstance(path, str) for path in inputs):
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(f"{self.task_id}: inputs: a non-empty list of files (paths or URLs) "
                                       f"expected, got {type(inputs).__name__}")
        return JobRequest(Framework.GENERIC, [*self.command, "--shards"],
                          num_workers=sharded.workers(self.task_id, self.workers), output_dirs=[self.output_dir],
                          shards=sharded.plan([[path] for path in inputs], self.sharding, output=self.output_dir))

    def finish(self, context, result: dict[str, Any]) -> dict[str, Any]:
        result = {k: v for k, v in result.items() if k != "model_path"}
        metrics = result.get("metrics") or {}
        if not self.every_part:
            assets.emit(context, self.outlets, {
                "data_version": self.data_version, "input": self.input_path, "output": self.output_path,
                "rows": metrics.get("rows_out"), "sha256": metrics.get("sha256"),
            })
            return {**result, "input": self.input_path, "output": self.output_path}
        shards = sharded.result(metrics)
        if self.outlets:
            parts = self._lineage()
            assets.emit(context, self.outlets, {"data_version": self.data_version, "output_dir": self.output_dir,
                                                "rows": sum(part["rows"] or 0 for part in parts), "parts": parts,
                                                "parts_total": len(self.inputs)})
        self.log.info("Preprocessed %d part(s) into %s: %s", len(self.inputs), self.output_dir, shards)
        return {**result, "output_dir": self.output_dir, "parts": len(self.inputs), "shards": shards}

    def _lineage(self) -> list[dict[str, Any]]:
        """Each listed part's input, committed file, rows and sha256. The rows and hash are read from its shard's
        marker, which the job wrote: taken only as a whole number and 64 hex digits (else None)."""
        from airflow_ml_provider.runtime.splits import part_location

        store = self.runner.setup.store
        if store is None:
            from airflow_ml_provider.hooks.artifact_store import ArtifactStore

            store = ArtifactStore(self.output_dir)
        listed = []
        for index, marker in enumerate(sharded.markers(store, self.output_dir, min(len(self.inputs), EVENT_PARTS))):
            told = ((marker or {}).get("parts") or [None])[0]
            told = told if isinstance(told, dict) else {}
            rows, sha256 = told.get("rows_out"), told.get("sha256")
            listed.append({"input": self.inputs[index],
                           "output": part_location(self.output_dir, index, self.inputs[index]),
                           "rows": rows if isinstance(rows, int) and not isinstance(rows, bool) and rows >= 0 else None,
                           "sha256": sha256 if isinstance(sha256, str) and _SHA256.fullmatch(sha256) else None})
        return listed


_SHA256 = re.compile(r"[0-9a-f]{64}")
