"""The template context of a check: a DAG's default Params, and stand-ins for what only a run knows.

A check has no metadata database and no run: an upstream task's XCom, ``ti.xcom_pull(...)``, a Variable
or a connection are unknown. They render as the text ``runtime://what`` (so an argv element or a path built
from one is still checked as one: it reads as a URL), and a spec field that needs a number or an object from one
is reported as "known at run time" instead of as an error of the DAG.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

RUNTIME = "runtime://"


class RuntimeValue(str):
    """Text standing for a value only a run knows; indexing or an attribute names a part of it."""

    def __new__(cls, what: str) -> RuntimeValue:
        value = super().__new__(cls, f"{RUNTIME}{what}")
        value.what = what
        return value

    def __getitem__(self, key: Any) -> RuntimeValue:
        return RuntimeValue(f"{self.what}[{key!r}]")

    def __getattr__(self, name: str) -> RuntimeValue:
        if name.startswith("__"):
            raise AttributeError(name)
        return RuntimeValue(f"{self.what}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> RuntimeValue:
        return self


def holds_runtime(value: Any) -> bool:
    """Whether a rendered value (nested) contains a stand-in for a run's value."""
    if isinstance(value, str):
        return RUNTIME in value
    if isinstance(value, Mapping):
        return any(holds_runtime(item) for item in value.values())
    if isinstance(value, (list, tuple, set)):
        return any(holds_runtime(item) for item in value)
    return False


def without_xcom_args(value: Any) -> Any:
    """``value`` with every XComArg (an upstream task's result) replaced by its stand-in."""
    from airflow.sdk.definitions.xcom_arg import PlainXComArg, XComArg

    if isinstance(value, PlainXComArg):
        key = "" if value.key == "return_value" else f"[{value.key!r}]"
        return RuntimeValue(f"XCom of {value.operator.task_id}{key}")
    if isinstance(value, XComArg):
        return RuntimeValue(f"XCom of {', '.join(op.task_id for op, _ in value.iter_references())}")
    if isinstance(value, dict):
        return {key: without_xcom_args(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(without_xcom_args(item) for item in value)
    return value


class _TaskInstance:
    """What templates may ask of ``ti`` in a check: its identity; any XCom is a stand-in."""

    def __init__(self, dag_id: str, task_id: str, run_id: str, map_index: int = -1):
        self.dag_id, self.task_id, self.run_id, self.map_index = dag_id, task_id, run_id, map_index
        self.try_number = 1

    def xcom_pull(self, task_ids: Any = None, key: str = "return_value", **_: Any) -> RuntimeValue:
        part = "" if key == "return_value" else f"[{key!r}]"
        return RuntimeValue(f"XCom of {task_ids or self.task_id}{part}")


class _DagRun:
    def __init__(self, dag_id: str, run_id: str, when: datetime):
        self.dag_id, self.run_id, self.conf = dag_id, run_id, {}
        self.logical_date = self.run_after = self.start_date = when
        self.data_interval_start = self.data_interval_end = when
        self.bundle_version = None


def check_context(dag: Any, task: Any, params: dict[str, Any], run_id: str = "check",
                  map_index: int = -1) -> dict[str, Any]:
    """A context with which ``task``'s template fields render as in a manual run with default Params."""
    when = datetime(2000, 1, 1, tzinfo=timezone.utc)
    return {
        "dag": dag, "task": task, "params": params, "run_id": run_id,
        "ti": _TaskInstance(dag.dag_id, task.task_id, run_id, map_index),
        "task_instance": _TaskInstance(dag.dag_id, task.task_id, run_id, map_index),
        "dag_run": _DagRun(dag.dag_id, run_id, when),
        "logical_date": when, "ds": when.strftime("%Y-%m-%d"), "ds_nodash": when.strftime("%Y%m%d"),
        "ts": when.isoformat(), "ts_nodash": when.strftime("%Y%m%dT%H%M%S"),
        "data_interval_start": when, "data_interval_end": when, "map_index_template": None,
        "var": RuntimeValue("var"), "conn": RuntimeValue("conn"), "macros": _macros(),
        "triggering_asset_events": {}, "inlets": [], "outlets": [],
    }


def _macros() -> Any:
    from airflow.sdk.execution_time import macros

    return macros
