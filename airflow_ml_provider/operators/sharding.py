"""What the operators that run a sharded job (batch scoring, preprocessing) share: the job's plan from their
options, its workers, the result they hand on, and the markers of its committed shards (``jobs.shards``).
One place, so that an option or a result key means the same in every such operator."""

from __future__ import annotations

import json
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_ml_provider.jobs.shards import shard_name
from airflow_ml_provider.runtime.shards import MARKER

OPTIONS = ("max_attempts", "max_failed_shards")  # a ShardPlan's, an operator's ``sharding`` passes on
RESULT = ("shards", "shards_done", "shards_ran", "shards_skipped", "shards_retried", "shards_failed", "failed_shards")
_MARKER_BYTES = 64 * 1024


def checked_options(task_id: str, sharding: dict[str, Any] | None, own: tuple[str, ...] = ()) -> dict[str, Any]:
    """``sharding`` as given, refused when parsing the DAG if a key is neither a plan's option nor ``own``."""
    known = (*own, *OPTIONS)
    unknown = set(sharding or {}) - set(known)
    if unknown:
        raise ValueError(f"{task_id}: sharding: unknown option(s) {sorted(unknown)} (use {known})")
    return dict(sharding or {})


def plan(inputs: list[list[str]], sharding: dict[str, Any], output: str | None = None) -> dict[str, Any]:
    """A plan of one shard per input list, run by workers that take many shards each (``runtime.shards.serve``);
    committed under ``output`` (default: the job's ``<model_dir>/shards``)."""
    return {"count": len(inputs), "inputs": inputs, "in_process": True,
            **{key: sharding[key] for key in OPTIONS if key in sharding}, **({"output": output} if output else {})}


def workers(task_id: str, value: int | str) -> int:
    """The rendered ``workers`` as a whole number; a task failure naming it otherwise (no retry fixes it)."""
    if not str(value).strip().isdigit() or int(value) < 1:
        raise AirflowFailException(f"{task_id}: workers: {value!r} is not a whole number of workers")
    return int(value)


def result(metrics: dict[str, Any]) -> dict[str, Any]:
    """The job's shard counts (its ``result`` line, in the follower's metrics): what XCom and lineage get."""
    return {key: metrics.get(key) for key in RESULT}


def markers(store, output: str, count: int) -> list[dict[str, Any] | None]:
    """The markers (a committed shard's record: its try, rows, inputs, what its worker told) of shards
    ``0..count-1`` under ``output`` (read through the artifact store's connection),
    None for a shard not committed or a marker that is not a JSON object (the job wrote it: data, bounded)."""
    found: list[dict[str, Any] | None] = []
    for index in range(count):
        try:
            with store.locate(f"{output.rstrip('/')}/{shard_name(index)}/{MARKER}").open("r") as f:
                marker = json.loads(f.read(_MARKER_BYTES))
        except (FileNotFoundError, ValueError, RecursionError):
            marker = None
        found.append(marker if isinstance(marker, dict) else None)
    return found
