"""The published constraints file (constraints/constraints-<version>.txt, docs/deploying.md) is what
scripts/constraints.py makes from requirements/control.lock: every pin of the tested control environment, so a
wheel installed with it gets the versions the tests ran."""

from __future__ import annotations

import re
import runpy
import subprocess
import sys

import airflow_ml_provider
from support import REPO

SCRIPT = REPO / "scripts" / "constraints.py"


def test_the_constraints_file_of_this_version_matches_the_lock():
    constraints = runpy.run_path(str(SCRIPT))
    path = constraints["path"]()
    assert path.name == f"constraints-{airflow_ml_provider.__version__}.txt"
    assert path.read_text() == constraints["render"]((REPO / "requirements" / "control.lock").read_text()), (
        f"{path} is out of date: run python scripts/constraints.py")
    check = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_every_pin_of_the_lock_is_a_constraint():
    lock = (REPO / "requirements" / "control.lock").read_text()
    pins = {re.sub(r"[-_.]+", "-", m[1]).lower(): m[2]
            for m in re.finditer(r"^([A-Za-z0-9][\w.-]*)(?:\[[^\]]*\])?==(\S+)", lock, re.MULTILINE)}
    path = runpy.run_path(str(SCRIPT))["path"]()
    listed = dict(line.split("==") for line in path.read_text().splitlines() if line and not line.startswith("#"))
    assert listed == pins
    assert {"apache-airflow", "mlflow-skinny", "psycopg", "pandas", "lightgbm"} <= set(listed)


def test_a_changed_lock_fails_the_check(tmp_path):
    """The comparison can fail: a lock with one version changed gives another file."""
    render = runpy.run_path(str(SCRIPT))["render"]
    lock = (REPO / "requirements" / "control.lock").read_text()
    changed = re.sub(r"^pandas==\S+", "pandas==0.0.1", lock, flags=re.MULTILINE)
    assert render(changed) != render(lock) and "pandas==0.0.1" in render(changed)
