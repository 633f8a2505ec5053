"""Preprocessing as a job: one command per data shard, fanned out with dynamic task mapping."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import Any

from airflow_ml_provider import assets
from airflow_ml_provider.jobs.spec import Framework
from airflow_ml_provider.operators.base_job import BaseJobOperator
from airflow_ml_provider.operators.config import JobRequest


class PreprocessOperator(BaseJobOperator):
    """Runs ``command + ["--input", input_path, "--output", output_path]`` as a one-worker job on the
    task's backend, so a shard is processed where the data lives. Map it over shards::

        PreprocessOperator.partial(task_id="preprocess", command=[...]).expand_kwargs(shards)

    where each shard is ``{"input_path": ..., "output_path": ...}``.

    Args:
        input_path, output_path: the shard to read and where to write it (paths, never data); templated.
        command: the preprocessing argv before its paths (default: ``runtime.preprocess``); templated.
        data_version: the source's content hash, recorded in the asset events; templated.
        job, follow, on_finish, ml_conn_id, elasticsearch_conn_id, deferrable: see
            :class:`~airflow_ml_provider.operators.base_job.BaseJobOperator`.

    Returns (XCom): the job summary (without ``model_path``: it trains nothing) plus ``input`` and
    ``output``; the job's ``result`` line (rows, content hash) is in ``metrics``.
    Every Asset in ``outlets`` gets an event per shard whose ``extra`` holds ``data_version``,
    ``input``, ``output``, ``rows`` and ``sha256`` of the output.
    """

    template_fields: Sequence[str] = ("command", "input_path", "output_path", "data_version",
                                      *BaseJobOperator.template_fields)
    ui_color = "#d5f5e3"

    def __init__(self, *, input_path: str, output_path: str, command: list[str] | None = None,
                 data_version: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.command = command or ["python", "-m", "airflow_ml_provider.runtime.preprocess"]
        self.input_path = input_path
        self.output_path = output_path
        self.data_version = data_version

    def job_request(self) -> JobRequest:
        return JobRequest(Framework.GENERIC, [*self.command, "--input", self.input_path, "--output", self.output_path],
                          output_dirs=[posixpath.dirname(self.output_path)])

    def finish(self, context, result: dict[str, Any]) -> dict[str, Any]:
        result = {k: v for k, v in result.items() if k != "model_path"}
        metrics = result.get("metrics") or {}
        assets.emit(context, self.outlets, {
            "data_version": self.data_version, "input": self.input_path, "output": self.output_path,
            "rows": metrics.get("rows_out"), "sha256": metrics.get("sha256"),
        })
        return {**result, "input": self.input_path, "output": self.output_path}
