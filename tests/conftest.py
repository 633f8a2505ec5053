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



# `make test` runs the suite on pytest-xdist workers (`-n`): a file's tests stay on one worker (they share
# module fixtures), and so do those that share one session fixture (one real kube-apiserver for
# tests/integration/kubernetes). The slowest files are handed out first, so that no long file starts last
# and leaves the other workers idle at the end.
SHARED_SESSION = ("tests/integration/kubernetes/",)
SLOW_FIRST = ("tests/ui/", "tests/integration/elastic/", "tests/integration/search/", "tests/integration/restarts/",
              "tests/integration/storage/", "tests/integration/kubernetes/", "tests/integration/pipeline/")


def _file(nodeid: str) -> str:
    return nodeid.split("::")[0]


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture scope
def pytest_collection_modifyitems(config, items) -> None:
    def rank(item) -> int:
        return next((i for i, prefix in enumerate(SLOW_FIRST) if _file(item.nodeid).startswith(prefix)),
                    len(SLOW_FIRST))

    items.sort(key=rank)  # stable: each file's tests keep their order


def pytest_xdist_make_scheduler(config, log):
    """Work units of one file each, or of one SHARED_SESSION folder (xdist's loadgroup marks would do, but
    pytest 9 no longer reports the group suffix that xdist 3.8 adds to node ids)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = _file(nodeid)
            return next((shared for shared in SHARED_SESSION if path.startswith(shared)), path)

    return ByFile(config, log)
