"""Pytest wiring; the settings themselves live in support.py, imported first."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from airflow_stack import migrated_database
from deployments import (  # noqa: F401 (fixtures of every test folder: the UI's and the REST tests')
    FOLLOWING,
    dag_files,
    deployment,
    deployments,
    mlflow_ui,
    serves_mlflow_ui,
    stack,
    ui_home,
)

import support  # (sets AIRFLOW_HOME and the DAG bundles before anything imports Airflow)


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """The metadata database dag.test() writes to (SQLite under AIRFLOW_HOME): a copy of the machine's
    migrated one where there is none yet (airflow_stack.migrated_database), else migrated (idempotent)."""
    database = Path(os.environ["AIRFLOW_HOME"]) / "airflow.db"
    if database.exists():
        subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    else:
        shutil.copyfile(migrated_database(os.environ), database)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    """The test that runs next, for ``deployments.deployment``'s teardown (which runs within this hook's)."""
    FOLLOWING["item"] = nextitem


# `make test` runs the suite on pytest-xdist workers (`-n`): a file's tests stay on one worker (they share
# module fixtures), and so do the files of a ONE_UNIT_FOLDERS folder (they share a session fixture). The
# files are handed out slowest first, so that no long file starts last and leaves the other workers idle
# at the end: SLOW_FIRST ranks them by what a clean `make test` measured
# (setup + calls in a clean-clone run's --durations, 3 workers on 2 cores), then whole folders, then the rest;
# the short files that keep the cores busy come last.
SLOW_FIRST = (
    "tests/ui/test_model_lifecycle_ui.py",  # a deployment, 4 pipeline runs, 3 scoring runs and a sweep: 40 min at load 20
    "tests/ui/test_pipeline_ui.py",  # ~350 s setup (a deployment, a pipeline run from its form) + calls
    "tests/ui/test_trigger_form.py",  # on test_pipeline_ui's deployment (support.SHARED_DEPLOYMENTS)
    "tests/security/test_params_through_rest.py",  # the same deployment, after the UI's runs
    "tests/integration/pytorch/test_local_ddp.py",  # ~400 s
    "tests/integration/elastic/test_local_elastic.py",  # ~360 s
    # long, but mostly waiting on a job (a deadline, a full disk, Kueue's queue, a wheel's install): started
    # early, beside the CPU-heavy files, they no longer leave the cores half idle at the end (95, 49, 29 s)
    "tests/integration/jobs/test_local_launcher_output.py",
    "tests/integration/kubernetes/test_kueue.py",
    "tests/integration/test_wheel.py",
    "tests/integration/kubernetes/test_rendered_jobs_run.py",  # ~200 s
    "tests/integration/storage/test_resume_on_object_storage.py",  # ~190 s
    "tests/integration/restarts/test_triggerer_restart.py",  # ~180 s: a deployment, two triggerer crashes
    "tests/integration/kubernetes/test_sync_task_in_airflow.py",  # ~170 s
    "tests/integration/pipeline/test_ml_training_pipeline.py",  # ~150 s
    "tests/integration/elastic/test_preemption_dag.py",  # ~140 s
    "tests/ui/",
    "tests/integration/storage/",
    "tests/integration/test_benchmarks_run.py",
    "tests/integration/operators/",
    "tests/integration/pipeline/",
    "tests/integration/search/",
    "tests/integration/kubernetes/",
    "tests/integration/",
    "tests/security/",
)


# Folders whose files share a session fixture too costly to build on every worker run as one unit: every
# file of tests/integration/kubernetes shares the session's kube-apiserver and etcd (and the Kubeflow
# cluster), which cost 5-7 CPU s to start and about 1 CPU s a minute idle; one per worker was three of each.
ONE_UNIT_FOLDERS = ("tests/integration/kubernetes/",)


# Files that mostly wait (deadlines, graces, restarts, outages, a 300 MB pipe: a third or less of their wall
# time on the CPU in a serial run). With four workers or more, the last one takes these first, beside workers
# that take the rest first: their waits overlap the others' work instead of idling a core (with three
# workers, three files waiting at once left the two cores 20-30 % idle for a minute at a time).
MOSTLY_WAITING = (
    "tests/integration/restarts/test_triggerer_restart.py",
    "tests/integration/jobs/test_local_launcher_output.py",
    "tests/integration/jobs/test_local_lifecycle.py",
    "tests/integration/jobs/test_local_backend.py",
    "tests/security/test_local_sandbox.py",
    "tests/integration/storage/test_storage_errors.py",
    "tests/integration/operators/test_training_metrics.py",
    "tests/integration/operators/test_task_lifecycle.py",
    "tests/integration/test_demo_progress.py",
    "tests/integration/logs/test_es_log_trigger.py",
    "tests/integration/logs/test_es_log_tail.py",
)


def _file(nodeid: str) -> str:
    return nodeid.split("::")[0]


def _work_unit(nodeid: str) -> str:
    """The file, or its SHARED_DEPLOYMENTS group, or its ONE_UNIT_FOLDERS folder."""
    file = _file(nodeid)
    return support.deployment_group(file) or next((f for f in ONE_UNIT_FOLDERS if file.startswith(f)), file)


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture scope
def pytest_collection_modifyitems(config, items) -> None:
    def rank(item) -> int:
        return next((i for i, prefix in enumerate(SLOW_FIRST) if _file(item.nodeid).startswith(prefix)),
                    len(SLOW_FIRST))

    items.sort(key=rank)  # stable: each file's tests keep their order


def pytest_xdist_make_scheduler(config, log):
    """Work units of one file each (or a group, see ``_work_unit``), handed out in the order
    above (xdist's loadgroup marks would do, but pytest 9 no longer reports the group suffix that xdist 3.8
    adds to node ids)."""
    from xdist.scheduler import LoadScopeScheduling

    # xdist would otherwise re-sort the units by their number of tests (--loadscope-reorder, its default),
    # which starts the many quick parametrized files first and the slow one-test files last.
    config.option.loadscopereorder = False

    workers = config.option.numprocesses
    waiter = f"gw{workers - 1}" if isinstance(workers, int) and workers >= 4 else None

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

        def _assign_work_unit(self, node) -> None:
            """With a waiting worker, the next unit of the node's kind (MOSTLY_WAITING for it, the rest for the
            others), else the next of the other kind: no unit is left waiting for a busy worker."""
            waits = node.gateway.id == waiter
            mine = next((scope for scope in self.workqueue if (scope in MOSTLY_WAITING) == waits), None)
            if waiter is not None and mine is not None:
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
