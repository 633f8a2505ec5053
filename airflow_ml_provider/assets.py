"""Airflow Assets for what the pipeline produces, so downstream DAGs (batch scoring, a serving refresh)
are scheduled on new models and data instead of on a clock.

A pipeline's model is one Asset; each deploy adds an event to it whose ``extra`` says which registered
version it was (name, version, metrics, run ids): consumers load that version, not whatever is newest
when they happen to run. Preprocessed data works the same way: one event per preprocessing job, listing every
part it committed (``PreprocessOperator``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow.sdk import Asset

# URI schemes start with "x-": Airflow normalizes no such URI, while any other scheme makes it load every
# installed provider's asset URI handlers when the DAG file is parsed (the amazon provider's imports
# boto3: about 0.5 s of CPU per parse).


def model_asset(pipeline: str) -> Asset:
    """The models ``pipeline`` registers (``DeployModelOperator(outlets=[...])``)."""
    return Asset(name=f"{pipeline}.model", uri=f"x-ml-model://{pipeline}", group="ml-model")


def data_asset(pipeline: str) -> Asset:
    """The preprocessed data ``pipeline`` produces (``PreprocessOperator(outlets=[...])``)."""
    return Asset(name=f"{pipeline}.data", uri=f"x-ml-data://{pipeline}", group="ml-data")


def emit(context: Mapping[str, Any], outlets: Iterable[Any], extra: dict[str, Any]) -> None:
    """Attach ``extra`` to the event Airflow records for every Asset in ``outlets`` when the task succeeds
    (aliases and other outlet kinds are left alone)."""
    for outlet in outlets:
        if isinstance(outlet, Asset):
            context["outlet_events"][outlet].extra = extra
