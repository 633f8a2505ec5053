"""Command templates: ``{{name}}`` placeholders in argv elements, replaced by values as plain text.

Substitution is a single pass over the template: a value is data and is never scanned again, so
a value such as ``{{x}}``, ``$(...)`` or ``; rm -rf /`` reaches the program as those exact
characters, inside one argv element, with no shell and no Jinja in between.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from airflow_ml_provider.patterns import argv_text as as_text

PLACEHOLDER = re.compile(r"\{\{\s*(.*?)\s*\}\}")
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
JINJA_SYNTAX = re.compile(r"\{%|%\}|\{#|#\}")


def placeholders(argument: str) -> list[str]:
    """The names referenced by ``{{ ... }}`` in one argv element, in order."""
    return PLACEHOLDER.findall(argument)


class ArgvTemplate:
    """A command template split once into literal text and placeholder names, so rendering thousands of
    trials (at DAG parse time) is a join per argument, not a regex pass."""

    def __init__(self, template: Sequence[str]):
        # PLACEHOLDER.split alternates literal text (even indexes) and placeholder names (odd indexes)
        self._parts = [PLACEHOLDER.split(argument) for argument in template]

    def render(self, values: Mapping[str, object]) -> list[str]:
        """Raises KeyError for a placeholder that names no value."""
        return [
            parts[0] if len(parts) == 1
            else "".join(part if i % 2 == 0 else as_text(values[part]) for i, part in enumerate(parts))
            for parts in self._parts
        ]
