"""The checks a DAG's first task makes on its trigger conf and Params: what Airflow's own Param
validation lets through. Airflow passes conf keys that name no Param to every task unvalidated, accepts
``5.0`` for an ``integer`` Param (JSON-schema draft 2020-12) and lets NaN through every number bound,
after which it reaches tasks as null. Each refusal names the Param (with its own description), never
echoes more than a short prefix of the offending key, and fails the run for good at its first task.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from airflow.sdk import conf
from airflow.sdk.exceptions import AirflowFailException
from pydantic import ValidationError

from airflow_ml_provider.jobs.spec import Placement
from airflow_ml_provider.patterns import CONTROL_CHARACTER, IMAGE_REF

MAX_CONF_KEYS = 64  # [ml_training] max_conf_keys
MAX_CONF_BYTES = 64 * 1024  # [ml_training] max_conf_bytes: the conf as JSON
_SHOWN_KEYS = 5
_SHOWN_CHARS = 40
DATA_SUFFIXES = (".npz", ".csv")
class ParamsRefused(AirflowFailException):
    """The run's Params cannot run; the message starts with ``Params refused:`` and names each one."""


def refuse(problems: list[str]) -> None:
    """Fail the run naming every refused Param, or do nothing when there is no problem."""
    if problems:
        raise ParamsRefused("Params refused: " + "; ".join(problems))


def conf_problems(run_conf: Mapping[str, Any] | None, declared: Mapping[str, Any]) -> list[str]:
    """The trigger conf's keys must name the DAG's Params, within a bounded count and size."""
    run_conf = run_conf or {}
    problems = []
    max_keys = conf.getint("ml_training", "max_conf_keys", fallback=MAX_CONF_KEYS)
    max_bytes = conf.getint("ml_training", "max_conf_bytes", fallback=MAX_CONF_BYTES)
    if len(run_conf) > max_keys:
        problems.append(f"the trigger conf has {len(run_conf)} keys, more than the {max_keys} allowed "
                        "([ml_training] max_conf_keys)")
    size = len(json.dumps(run_conf, default=str))
    if size > max_bytes:
        problems.append(f"the trigger conf is {size} bytes as JSON, more than the {max_bytes} allowed "
                        "([ml_training] max_conf_bytes)")
    unknown = sorted(key for key in run_conf if key not in declared)
    if unknown:
        shown = ", ".join(_short(key) for key in unknown[:_SHOWN_KEYS])
        more = f" and {len(unknown) - _SHOWN_KEYS} more" if len(unknown) > _SHOWN_KEYS else ""
        problems.append(f"{shown}{more}: not a Param of this DAG (its Params: {', '.join(sorted(declared))})")
    return problems


def number_problems(values: Mapping[str, Any], params: Mapping[str, Any],
                    optional: Collection[str] = ()) -> list[str]:
    """Every ``number`` Param holds a finite number, every ``integer`` Param an integer (``5``, not ``5.0``:
    the trainers take it as an integer argument); null only for the names in ``optional``. ``params`` is
    the DAG's ParamsDict (Param objects, for their schema and description)."""
    problems = []
    for name in params:
        param = params.get_param(name) if hasattr(params, "get_param") else params[name]
        types = _types(getattr(param, "schema", {}))
        if name not in values or not types & {"number", "integer"}:
            continue
        value, words = values[name], describe(param)
        if value is None and name not in optional:
            problems.append(f"{name}: no number given (NaN and Infinity arrive as null through JSON): {words}")
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{name}: {value!r} is not a finite number: {words}")
        elif "integer" in types and "number" not in types and isinstance(value, float):
            problems.append(f"{name}: {value!r} is not an integer (write {int(value)!r} without a decimal "
                            f"point): {words}" if value.is_integer() else f"{name}: {value!r} is not an integer: {words}")
    return problems


def text_problems(values: Mapping[str, Any], params: Mapping[str, Any]) -> list[str]:
    """No ``string`` Param holds a control character (a line break would forge lines in a job's log)."""
    problems = []
    for name in params:
        param = params.get_param(name) if hasattr(params, "get_param") else params[name]
        value = values.get(name)
        if "string" in _types(getattr(param, "schema", {})) and isinstance(value, str) and CONTROL_CHARACTER.search(value):
            problems.append(f"{name}: holds a control character (line break, tab, ...): {describe(param)}")
    return problems


def data_file(name: str, value: str, roots: Sequence[str], words: str) -> tuple[str | None, list[str]]:
    """A data file a Param names, confined to ``roots``: returns its resolved path (symlinks and ``..``
    resolved before the check, so neither leads out of a root), or the problems. Confinement is checked
    before existence, so the answer tells nothing about files outside the roots, and nothing quotes the
    file's content. Spaces and non-ASCII letters are fine; control characters are not."""
    if CONTROL_CHARACTER.search(value) or not os.path.isabs(value) or not value.lower().endswith(DATA_SUFFIXES):
        return None, [f"{name}: {_short(value)} is not an absolute path of an .npz or .csv file: {words}"]
    resolved = os.path.realpath(value)
    if not any(_inside(resolved, os.path.realpath(root)) for root in roots):
        return None, [f"{name}: {value!r} is outside the data roots ({', '.join(roots)}); more roots are set by "
                      "[ml_training] data_roots or the ml_training connection's data_roots extra"]
    if not os.path.isfile(resolved) or not os.access(resolved, os.R_OK):
        return None, [f"{name}: {value!r} is not a file the Airflow worker can read"]
    return resolved, []


def image_problems(name: str, value: str | None, backend: str, words: str,
                   local_images: Sequence[str] = ()) -> list[str]:
    """An image Param is, on the local backend, the absolute path of one of the deployment's Python
    environments (``local_images``: a UI user never picks an arbitrary program to run), and a registry
    reference on the Kubernetes backends; a relative path is neither."""
    if not value:
        return []
    if backend == "local":
        if not os.path.isabs(value) or CONTROL_CHARACTER.search(value):
            return [f"{name}: {_short(value)} is not an absolute path; the local backend runs a Python "
                    f"environment's prefix: {words}"]
        if os.path.realpath(value) not in {os.path.realpath(image) for image in local_images}:
            allowed = ", ".join(local_images) or "none configured"
            return [f"{name}: {_short(value)} is not one of the local environments this deployment allows "
                    f"({allowed}; [ml_training] local_images adds more): {words}"]
        return []
    if re.search(IMAGE_REF, value):
        return []
    return [f"{name}: {_short(value)} is not a registry reference such as registry.example.com/team/train:1.2 "
            f"(backend {backend}): {words}"]


def placement(values: Mapping[str, Any], params: Mapping[str, Any], selector: str = "node_selector",
              tolerations: str = "tolerations") -> tuple[dict[str, Any], list[str]]:
    """The Params ``selector`` (node labels the jobs' pods require) and ``tolerations`` (taints they
    tolerate: a spot pool's, e.g.) as the jobs' ``kubernetes`` options, checked as Kubernetes checks them
    (``jobs.spec.Placement``); or the problems, each naming the Param and the field in it."""
    names = {"node_selector": selector, "tolerations": tolerations}
    try:
        chosen = Placement(node_selector=values.get(selector) or {}, tolerations=values.get(tolerations) or [])
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            name, *inside = error["loc"]
            param = params.get_param(names[name]) if hasattr(params, "get_param") else params[names[name]]
            where = "".join(f"[{part}]" if isinstance(part, int) else f"[{_short(str(part))}]"
                            for part in inside if part != "[key]")
            if error["type"] == "string_pattern_mismatch":
                what = "key" if inside[-1] == "[key]" or (name, inside[-1]) == ("tolerations", "key") else "value"
                said = f"{_short(str(error['input']))} is not a Kubernetes label {what}"
            else:
                said = error["msg"].removeprefix("Value error, ")
            problems.append(f"{names[name]}{where}: {said}: {describe(param)}")
        return {}, problems
    return chosen.options().model_dump(exclude_defaults=True), []


def describe(param) -> str:
    """How the Param describes itself to a person (its description, else its title)."""
    schema = getattr(param, "schema", {}) or {}
    return (getattr(param, "description", None) or schema.get("title") or "").strip() or "see the DAG's Params"


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _types(schema: Mapping[str, Any]) -> set[str]:
    kind = schema.get("type")
    return set(kind) if isinstance(kind, list) else {kind} if kind else set()


def _short(key: str) -> str:
    return repr(key if len(key) <= _SHOWN_CHARS else key[:_SHOWN_CHARS] + "...")
