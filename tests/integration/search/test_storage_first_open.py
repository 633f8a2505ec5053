"""A new search database opened by several processes at once (a search beside its restarted task, mapped
searches sharing one storage URL) opens in every one of them: Optuna creates the schema with no lock
(optuna#1092), and before the fix one of six processes released together failed with "table studies
already exists" or a duplicate version row in every try (5 of 5). Real processes, a real SQLite file."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from support import REPO

pytestmark = pytest.mark.integration

_OPENER = """
import sys, time
from pathlib import Path
from airflow_ml_provider.search.study import open_storage
import optuna  # imported before the start line: the processes race in the open itself

url, ready, go, name = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
ready.touch()
while not go.exists():
    time.sleep(0.001)
try:
    storage = open_storage(url)
    optuna.create_study(storage=storage, study_name=name)
    print("opened")
except Exception as exc:
    print(f"{type(exc).__name__}: {exc}"[:300])
"""


def test_six_processes_opening_a_new_database_at_once_all_open_it(tmp_path):
    url, go = f"sqlite:///{tmp_path / 'optuna.db'}", tmp_path / "go"
    names = [f"search-{i}" for i in range(6)]
    openers = [subprocess.Popen([sys.executable, "-c", _OPENER, url, str(tmp_path / f"ready-{name}"), str(go), name],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
               for name in names]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready-{name}").exists() for name in names) and time.monotonic() < deadline:
        time.sleep(0.05)
    go.touch()  # all six open the missing database within a millisecond or two of each other
    said = [opener.communicate(timeout=120)[0].strip() for opener in openers]
    assert said == ["opened"] * 6, said

    import optuna

    assert sorted(s.study_name for s in optuna.get_all_study_summaries(url)) == names
