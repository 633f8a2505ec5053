"""docs/frameworks.md's table of which backend runs which framework is the package's (``backends_for``): a framework
or backend added, or a refusal changed, without the page saying so fails here."""

from __future__ import annotations

import re

from airflow_ml_provider.jobs.backends import BACKENDS, backends_for
from airflow_ml_provider.jobs.spec import Framework
from support import REPO


def test_the_frameworks_table_is_what_the_backends_run():
    text = (REPO / "docs" / "frameworks.md").read_text()
    header = re.search(r"^\| framework \| operator \|(.*)\|$", text, re.M)
    columns = [cell.strip().strip("`") for cell in header.group(1).split("|")]
    assert sorted(columns) == sorted(BACKENDS)
    rows = re.findall(r"^\| `([a-z-]+)` \| `?[A-Za-z]*`? \|(.*)\|$", text, re.M)
    table = {framework: {backend for backend, cell in zip(columns, cells.split("|")) if cell.strip() == "yes"}
             for framework, cells in rows}
    assert table == {f.value: set(backends_for(f.value)) for f in Framework}
