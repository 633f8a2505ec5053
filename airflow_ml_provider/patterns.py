"""Patterns that more than one layer checks a value against: forms (JSON schema), pydantic models and
the Kubernetes backends' API calls. Import-light: DAG files and the provider metadata read it."""

from __future__ import annotations

import re

# A DNS-1123 label: what Kubernetes requires of namespaces, job and volume names.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_LABEL_MAX = 63


def whole(pattern: str) -> str:
    """A JSON-schema pattern that must match the whole value, the same in the browser (ECMAScript)
    and on the server (Python ``re.search``, where ``$`` would also match before a final newline)."""
    return rf"^(?:{pattern})$(?!\n)"


def bounded(words: str, **limits: float) -> list[dict]:
    """JSON-schema bounds (``minimum``, ``maximum``, ``exclusiveMinimum``...) as an ``allOf`` entry: the
    server refuses an out-of-range value when the run is triggered, quoting ``words`` with the bound,
    while Airflow's trigger form, which silently clamps a number to a top-level minimum/maximum, leaves
    the value as typed. Use as ``Param(..., allOf=bounded("1 to 64 workers", minimum=1, maximum=64))``."""
    return [{"description": words, **limits}]


MODEL_NAME = whole(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")  # a registered model's name, as the example DAGs take it
# A container image reference: [registry[:port]/]path[:tag][@sha256:digest]; never a local path.
IMAGE_REF = whole(
    r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]{1,5})?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?"
)
