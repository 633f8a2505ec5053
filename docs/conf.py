"""Sphinx configuration: Markdown pages (MyST). The configuration and connection reference is written into
the pages themselves from the provider's metadata (docs/reference.py)."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import airflow_ml_provider  # noqa: E402

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
