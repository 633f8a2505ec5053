"""Airflow Assets for what the pipeline produces, so downstream DAGs (batch scoring, a serving refresh)
are scheduled on new models and data instead of on a clock.

A pipeline's model is one Asset; each deploy adds an event to it whose ``extra`` says which registered
version it was (name, version, metrics, run ids): consumers load that version, not whatever is newest
when they happen to run. Preprocessed data works the same way, one event per processed shard.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow.sdk import Asset


def model_asset(pipeline: str) -> Asset:
    """The models ``pipeline`` registers (``DeployModelOperator(outlets=[...])``)."""
    return Asset(name=f"{pipeline}.model", uri=f"model://{pipeline}", group="ml-model")


def data_asset(pipeline: str) -> Asset:
    """The preprocessed data ``pipeline`` produces (``PreprocessOperator(outlets=[...])``)."""
    return Asset(name=f"{pipeline}.data", uri=f"ml-data://{pipeline}", group="ml-data")


def emit(context: Mapping[str, Any], outlets: Iterable[Any], extra: dict[str, Any]) -> None:
    """Attach ``extra`` to the event Airflow records for every Asset in ``outlets`` when the task succeeds
    (aliases and other outlet kinds are left alone)."""
    for outlet in outlets:
        if isinstance(outlet, Asset):
            context["outlet_events"][outlet].extra = extra
