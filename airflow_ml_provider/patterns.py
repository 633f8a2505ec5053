"""Patterns that more than one layer checks a value against: forms (JSON schema), pydantic models and
the Kubernetes backends' API calls. Import-light: DAG files and the provider metadata read it."""

from __future__ import annotations

import pprint
import re

# A DNS-1123 label: what Kubernetes requires of namespaces, job and volume names.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_LABEL_MAX = 63

# A control character (a line break, a tab, NUL, DEL): refused in a value a person types, which would
# otherwise forge lines in a job's log or split an argument.
CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f]")


def whole(pattern: str) -> str:
    """A JSON-schema pattern that must match the whole value, the same in the browser (ECMAScript)
    and on the server (Python ``re.search``, where ``$`` would also match before a final newline)."""
    return rf"^(?:{pattern})$(?!\n)"


def bounded(words: str, **limits: float | str) -> list[dict]:
    """JSON-schema bounds (``minimum``, ``maximum``, ``exclusiveMinimum``...) or a ``pattern``, as an
    ``allOf`` entry: the server refuses a value outside them when the run is triggered, quoting ``words``
    beside the failed keyword (a refused pattern no longer shows only the regex), while Airflow's trigger
    form, which silently clamps a number to a top-level minimum/maximum, leaves the value as typed. Use as
    ``Param(..., allOf=bounded("1 to 64 workers", minimum=1, maximum=64))``. Raises ValueError when
    ``words`` are too long to appear whole in the refusal (jsonschema prints the schema wrapped at 72
    columns, which would split them)."""
    entry = {"description": words, **limits}
    if repr(words) not in pprint.pformat(entry, width=72):
        raise ValueError(f"bounded: {words!r} would be split in a refusal; say it in fewer words")
    return [entry]


def required(kind: str, words: str, **limits: float | str) -> dict:
    """The schema keywords of a Param a run needs but whose default is valid: ``type`` admits null, so
    Airflow's trigger form draws no "required" star on the field (its rule: a type list without null), while
    the ``allOf`` entry (``bounded``) refuses null, an emptied field, when the run is triggered, quoting
    ``words``. Use as ``Param(2, title=..., **required("integer", "Workers: 1 to 64.", minimum=1))``."""
    return {"type": ["null", kind], "allOf": bounded(words, type=kind, **limits)}


MODEL_NAME = whole(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")  # a registered model's name, as the example DAGs take it
MODEL_NAME_WORDS = "Model name: up to 100 of A-Z a-z 0-9 _ . -"
# A container image reference: [registry[:port]/]path[:tag][@sha256:digest]; never a local path.
IMAGE_REF = whole(
    r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]{1,5})?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?"
)


# What a recipe trial fills in when it runs (recipes leave these characters in its argv at parse time): the run's
# data folder ({{run_dir}}) and a recipe Param's value ({{params.<name>}}).
RUN_PLACEHOLDER = re.compile(r"\{\{(run_dir|params\.([A-Za-z_][A-Za-z0-9_]*))\}\}")


def argv_text(value: object) -> str:
    """The argv spelling of a recipe value (booleans as ``true``/``false``, as YAML writes them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
