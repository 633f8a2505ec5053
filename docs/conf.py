"""Sphinx configuration: Markdown pages (MyST); the configuration and connection reference is generated
from the provider's own metadata (get_provider_info), so it cannot drift from what Airflow is told."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import airflow_ml_provider  # noqa: E402
from airflow_ml_provider.get_provider_info import get_provider_info  # noqa: E402  (standard library only)

project = "airflow-ml-provider"
version = release = airflow_ml_provider.__version__
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
# _*: pages other helpers hand in (docs/_from_<name>.md) until they are folded in; _build: the output.
exclude_patterns = ["_*", "**/_*"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
nitpicky = True
smartquotes = False  # code-like text (quotes in option descriptions, examples) stays as written
html_theme = "alabaster"
html_title = f"airflow-ml-provider {release}"

GENERATED = "<!-- generated: {} -->"


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
    return "\n".join(rows)


def _generate(app, docname, source):
    text = source[0]
    text = text.replace(GENERATED.format("ml_training config"), config_reference())
    for conn_type in ("mltraining", "mlregistry"):
        text = text.replace(GENERATED.format(f"{conn_type} connection"), connection_reference(conn_type))
    source[0] = text


def setup(app):
    app.connect("source-read", _generate)
