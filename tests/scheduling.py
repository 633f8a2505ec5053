"""Where `make test` runs each test file: in which order the files start, which files share a pytest-xdist
worker (a work unit), and which worker takes which files first (tests/conftest.py's scheduler reads these)."""

from __future__ import annotations

import support

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
    "tests/integration/test_wheel_deployment.py",  # ~120 s: the wheel installed, a deployment, a pipeline run
    # long, but mostly waiting on a job (a deadline, a full disk, Kueue's queue, a wheel's install): started
    # early, beside the CPU-heavy files, they no longer leave the cores half idle at the end (95, 49, 29 s)
    "tests/integration/jobs/test_local_launcher_output.py",
    "tests/integration/kubernetes/test_kueue.py",
    "tests/integration/test_wheel.py",
    "tests/integration/images/",  # 6-15 min serial by load (the elastic MPIJob 150 s): jobs in the training image
    "tests/integration/storage/test_resume_on_object_storage.py",  # ~190 s
    "tests/integration/restarts/test_triggerer_restart.py",  # ~180 s: a deployment, two triggerer crashes
    "tests/integration/kubernetes/test_sync_task_in_airflow.py",  # ~170 s
    "tests/integration/pipeline/test_ml_training_pipeline.py",  # ~150 s
    "tests/integration/elastic/test_preemption_dag.py",  # ~140 s
    "tests/integration/ps/",  # ~125 s (90 + 35) serially on a quiet machine: five-process TensorFlow jobs
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


def file_of(nodeid: str) -> str:
    return nodeid.split("::")[0]


def work_unit(nodeid: str) -> str:
    """The file, or its SHARED_DEPLOYMENTS group, or its ONE_UNIT_FOLDERS folder."""
    file = file_of(nodeid)
    return support.deployment_group(file) or next((f for f in ONE_UNIT_FOLDERS if file.startswith(f)), file)


def rank(nodeid: str) -> int:
    """The place of the test's file in SLOW_FIRST (after every listed one if it is not listed)."""
    return next((i for i, prefix in enumerate(SLOW_FIRST) if file_of(nodeid).startswith(prefix)), len(SLOW_FIRST))
