"""A trial's job: the template spec with its ``{{ params.<name> }}`` placeholders replaced by the trial's values.

The replacement is plain data: one regex pass over argv elements and environment values, never a shell
and never a template engine, so a value can neither run code nor inject another placeholder. An argv
element holding a JSON object (such as the LightGBM trainer's ``--params-json``) is substituted inside
the parsed JSON, so ``{"num_leaves": "{{ params.num_leaves }}"}`` becomes ``{"num_leaves": 31}``; elsewhere
numbers and booleans are written as JSON text (``0.05``, ``true``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from airflow_ml_provider.artifact_layout import job_dirs
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.search.space import SearchSpace, SearchSpaceError

PLACEHOLDER = re.compile(r"\{\{\s*params\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def placeholder(name: str) -> str:
    """The canonical placeholder text for one parameter."""
    return f"{{{{ params.{name} }}}}"


def check_template(spec: TrainingJobSpec, space: SearchSpace) -> None:
    """Every parameter must reach the job and every placeholder must name a parameter.

    Raises:
        SearchSpaceError: naming the unused parameter or the unknown placeholder.
    """
    texts = [*spec.command, *spec.env.values()]
    used = {match[1] for text in texts for match in PLACEHOLDER.finditer(text)}
    unknown = sorted(used - set(space.params))
    if unknown:
        raise SearchSpaceError(f"trial: placeholder {placeholder(unknown[0])} names no parameter of the search "
                               f"space (parameters: {sorted(space.params)})")
    unused = sorted(set(space.params) - used)
    if unused:
        raise SearchSpaceError(f"search_space.{unused[0]}: the trial never uses it; put "
                               f"{placeholder(unused[0])} in its command or environment")


def render_trial(spec: TrainingJobSpec, values: dict[str, Any]) -> TrainingJobSpec:
    """The spec of one trial's job."""
    data = spec.model_dump()
    data["command"] = [_fill_argument(argument, values) for argument in spec.command]
    data["env"] = {name: _fill_text(text, values) for name, text in spec.env.items()}
    return TrainingJobSpec(**data)


def _fill_argument(argument: str, values: dict[str, Any]) -> str:
    if argument.startswith("{") and PLACEHOLDER.search(argument):
        try:
            document = json.loads(argument)
        except ValueError:
            pass
        else:
            return json.dumps(_fill_json(document, values))
    return _fill_text(argument, values)


def _fill_json(node: Any, values: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        return {key: _fill_json(value, values) for key, value in node.items()}
    if isinstance(node, list):
        return [_fill_json(value, values) for value in node]
    if isinstance(node, str):
        whole = PLACEHOLDER.fullmatch(node.strip())
        return values[whole[1]] if whole else _fill_text(node, values)
    return node


def _fill_text(text: str, values: dict[str, Any]) -> str:
    return PLACEHOLDER.sub(lambda match: _as_text(values[match[1]]), text)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def spec_template(spec: dict[str, Any],
                  default_artifact_dir: Callable[[str], str | None]) -> Callable[[str], TrainingJobSpec]:
    """Job name -> the trial's spec from a JSON-serializable template (how a trigger carries it): the
    job's own model and checkpoint directories wherever the template names none."""

    def build(name: str) -> TrainingJobSpec:
        return TrainingJobSpec(**{**job_dirs(default_artifact_dir(name)), **spec})

    return build


def portable_template(template: Callable[[str], TrainingJobSpec],
                      default_artifact_dir: Callable[[str], str | None], name: str) -> dict[str, Any]:
    """The inverse of ``spec_template`` for a template built any way (e.g. a training operator's
    ``build_spec``): its spec for ``name`` as JSON data, minus the directories that are the job's defaults."""
    data = template(name).model_dump(mode="json", exclude_none=True)
    for key, default in job_dirs(default_artifact_dir(name)).items():
        if data.get(key) == default:
            del data[key]
    return data
