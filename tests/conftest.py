"""Pytest wiring; the settings themselves live in support.py (imported first) and scheduling.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import postgres_server
import pytest
import scheduling
from airflow_stack import migrated_database
from deployments import (  # noqa: F401 (fixtures and a hook of every test folder: the UI's and the REST tests')
    dag_files,
    deployment,
    deployments,
    mlflow_ui,
    pytest_runtest_teardown,
    serves_mlflow_ui,
    stack,
    ui_home,
)

import support  # noqa: F401 (sets AIRFLOW_HOME and the DAG bundles before anything imports Airflow)


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """The metadata database dag.test() writes to (SQLite under AIRFLOW_HOME): a copy of the machine's
    migrated one where there is none yet (airflow_stack.migrated_database), else migrated (idempotent)."""
    database = Path(os.environ["AIRFLOW_HOME"]) / "airflow.db"
    if database.exists():
        subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    else:
        shutil.copyfile(migrated_database(os.environ), database)


def pytest_sessionfinish(session, exitstatus) -> None:
    """This process's PostgreSQL server, if a deployment started one, stopped (its folder removed)."""
    postgres_server.stop_shared()


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture scope
def pytest_collection_modifyitems(config, items) -> None:
    items.sort(key=lambda item: scheduling.rank(item.nodeid))  # stable: each file's tests keep their order


def pytest_xdist_make_scheduler(config, log):
    """Work units of one file each (or a group, see ``scheduling.work_unit``), handed out in SLOW_FIRST's
    order (xdist's loadgroup marks would do, but pytest 9 no longer reports the group suffix that xdist 3.8
    adds to node ids)."""
    from xdist.scheduler import LoadScopeScheduling

    # xdist would otherwise re-sort the units by their number of tests (--loadscope-reorder, its default),
    # which starts the many quick parametrized files first and the slow one-test files last.
    config.option.loadscopereorder = False

    workers = config.option.numprocesses
    waiter = f"gw{workers - 1}" if isinstance(workers, int) and workers >= 4 else None

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scheduling.work_unit(nodeid)

        def _assign_work_unit(self, node) -> None:
            """With a waiting worker, the next unit of the node's kind (MOSTLY_WAITING for it, the rest for the
            others), else the next of the other kind: no unit is left waiting for a busy worker."""
            waits = node.gateway.id == waiter
            if waiter is not None and (
                mine := next((scope for scope in self.workqueue if (scope in scheduling.MOSTLY_WAITING) == waits), None)
            ):
                self.workqueue.move_to_end(mine, last=False)
            super()._assign_work_unit(node)

        def _reschedule(self, node) -> None:
            """The next unit once the node's last test is left (xdist's default: its last two), the least a
            worker needs (it holds its last test until it knows the next). Bound earlier, a unit waited behind
            a test that ran for minutes (an elastic Horovod stall) while other workers were free."""
            if self.workqueue and not node.shutting_down and self._pending_of(self.assigned_work[node]) > 1:
                return
            super()._reschedule(node)

    return ByFile(config, log)
