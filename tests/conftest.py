"""Pytest wiring; the settings themselves live in support.py, imported first."""

from __future__ import annotations

import subprocess
import sys

import pytest
import support  # noqa: F401  (sets AIRFLOW_HOME and the DAG bundles before anything imports Airflow)


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """The metadata database dag.test() writes to (SQLite under AIRFLOW_HOME; migrating is idempotent)."""
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
