"""The configuration and connection reference, written into the Markdown pages themselves from the provider's
own metadata (``get_provider_info``), so that a reader of the repository sees the tables and they cannot drift
from what Airflow is told: ``python docs/reference.py`` rewrites them; ``tests/unit/test_docs.py`` fails while
a page differs from what it would write."""

from __future__ import annotations

import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))

from airflow_ml_provider.get_provider_info import get_provider_info  # noqa: E402  (standard library only)

PAGES = ("configuration.md", "connections.md", "deploying.md")
_BLOCK = re.compile(r"(<!-- generated: (?P<what>[^>]+?) -->\n).*?(<!-- end of generated -->\n)", re.DOTALL)


def _cell(value) -> str:
    return "" if value in (None, "") else f"`{value}`"


def config_reference() -> str:
    """Every [ml_training] option as the provider declares it to Airflow."""
    out = []
    for section, spec in get_provider_info()["config"].items():
        out += [f"{spec['description']}", ""]
        for name, option in spec["options"].items():
            out += [f"### `{name}`", "", option["description"], "",
                    "| type | default | example | environment variable |", "|---|---|---|---|",
                    f"| {option['type']} | {_cell(option['default']) or 'unset'} | {_cell(option['example'])} "
                    f"| `AIRFLOW__{section.upper()}__{name.upper()}` |", ""]
    return "\n".join(out)


def connection_reference(conn_type: str) -> str:
    """The extra fields of a connection type's form, as the provider declares them."""
    (conn,) = [c for c in get_provider_info()["connection-types"] if c["connection-type"] == conn_type]
    rows = ["| extra | label | type | what |", "|---|---|---|---|"]
    for name, field in conn["conn-fields"].items():
        kind = next(t for t in field["schema"]["type"] if t != "null")
        text = field["description"].replace("|", "\\|")
        rows.append(f"| `{name}` | {field['label']} | {kind} | {text} |")
    return "\n".join(rows) + "\n"


def _reference(what: str) -> str:
    if what == "ml_training config":
        return config_reference()
    if what.endswith(" connection"):
        return connection_reference(what.removesuffix(" connection"))
    raise ValueError(f"no generated reference named {what!r}")


def render(text: str) -> str:
    """``text`` with every generated block (between its two markers) written anew."""
    return _BLOCK.sub(lambda m: m.group(1) + "\n" + _reference(m["what"]).rstrip("\n") + "\n\n" + m.group(3), text)


def main() -> int:
    for page in PAGES:
        path = DOCS / page
        path.write_text(render(path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
