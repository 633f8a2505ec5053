"""Shared test settings: a private AIRFLOW_HOME (one per pytest-xdist worker) and DAG bundles, set before
Airflow is imported, and the probe for the training environment."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TEST_DAGS = Path(__file__).resolve().parent / "dags"

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-ml-test-"))
worker = os.environ.get("PYTEST_XDIST_WORKER")  # `make test` runs workers in parallel: one SQLite DB each
if worker and Path(os.environ["AIRFLOW_HOME"]).name != worker:  # not again in a subprocess of the worker
    os.environ["AIRFLOW_HOME"] = str(Path(os.environ["AIRFLOW_HOME"], worker))
    Path(os.environ["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(TEST_DAGS)
os.environ["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"] = json.dumps([
    {"name": name, "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle", "kwargs": {"path": str(path)}}
    for name, path in (("shipped", REPO / "dags"), ("tests", TEST_DAGS))
])
os.environ.setdefault("AIRFLOW_ML_LOCAL_IMAGE", str(REPO / ".venv-train"))
TRAINING_IMAGE = Path(os.environ["AIRFLOW_ML_LOCAL_IMAGE"])
TRAINING_PYTHON = TRAINING_IMAGE / "bin" / "python"
needs_training_env = pytest.mark.skipif(
    not TRAINING_PYTHON.exists(), reason=f"no training environment at {TRAINING_IMAGE} (make training-env)"
)

# Test files whose tests share one real deployment (tests/deployments.py), by group: each group is one work
# unit of `make test`'s workers (tests/scheduling.py), so that its deployment starts once (about 25 CPU s).
SHARED_DEPLOYMENTS = {"tests/ui/test_pipeline_ui.py": "ml_training_pipeline UI",
                      "tests/ui/test_trigger_form.py": "ml_training_pipeline UI",
                      "tests/security/test_params_through_rest.py": "ml_training_pipeline UI",
                      "tests/ui/test_training_view.py": "ml_training_pipeline view",  # issue 45: one deployment
                      "tests/ui/test_marked_by_hand.py": "ml_training_pipeline view"}


def deployment_group(nodeid: str) -> str | None:
    """The SHARED_DEPLOYMENTS group of the test file of ``nodeid`` (a test's or a file's), if it is in one."""
    return SHARED_DEPLOYMENTS.get(nodeid.split("::")[0])


# Whether the training env's Horovod was built with Gloo: the record `make training-env` keeps of its build,
# read as the local launcher reads it (horovodrun_main.recorded_gloo); without one, TensorFlow is imported and
# asked, as horovodrun does (3.5 CPU s, before any worker can start).
_HOROVOD_PROBE = """
import runpy, sys
if not runpy.run_path(sys.argv[1])["recorded_gloo"]():
    import horovod.tensorflow as hvd
    assert hvd.gloo_built()
"""


def horovod_available() -> bool:
    """Probed once per run (``_HOROVOD_PROBE``): the pytest-xdist workers, started after the controller
    imported this module, inherit the answer through the environment."""
    known = os.environ.get("AIRFLOW_ML_TEST_HOROVOD")
    if known in ("0", "1"):
        return known == "1"
    from airflow_ml_provider.jobs.backends.local import horovodrun_main

    probe = [TRAINING_PYTHON, "-c", _HOROVOD_PROBE, horovodrun_main.__file__]
    found = TRAINING_PYTHON.exists() and subprocess.run(probe, capture_output=True).returncode == 0
    os.environ["AIRFLOW_ML_TEST_HOROVOD"] = "1" if found else "0"
    return found


needs_horovod = pytest.mark.skipif(
    not horovod_available(), reason=f"no Horovod in the training environment {TRAINING_IMAGE} (make training-env)"
)


def _sandbox_unavailable() -> str | None:
    from airflow_ml_provider.jobs.backends.local import sandbox

    return sandbox.unavailable()


needs_sandbox = pytest.mark.skipif(_sandbox_unavailable() is not None,
                                   reason=f"no sandbox here: {_sandbox_unavailable()}")


def torch_available() -> bool:
    return (TRAINING_IMAGE / "bin" / "torchrun").exists()


needs_torch = pytest.mark.skipif(
    not torch_available(), reason=f"no PyTorch (torchrun) in the training environment {TRAINING_IMAGE} (make training-env)"
)


def wait_for(predicate, timeout: float = 120.0, what: str = "condition"):
    """Poll until ``predicate()`` is truthy and return its value; fail naming what never happened."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def final_status(backend, name: str, timeout: float = 120):
    """A local job's status once it has ended."""
    return wait_for(lambda: (s := backend.status(name)).state.is_terminal and s, timeout, what=f"{name} to end")


def job_log(backend, name: str) -> str:
    """What a local job's launcher wrote to its log so far ("" before it starts)."""
    path = backend.job_dir(name) / "output.log"
    return path.read_text() if path.exists() else ""


def job_uid(backend, name: str) -> str:
    """The marker every process of a local job carries (``job_processes`` finds them by it)."""
    return json.loads((backend.job_dir(name) / "job.json").read_text())["uid"]


def rank_process(job_dir: Path, rank: int, trainer: str, rank_env: str = "HOROVOD_RANK"):
    """The trainer process (psutil.Process) of ``rank`` in a local job, found by the job's uid, the rank
    variable its launcher sets (Horovod's ``HOROVOD_RANK``, torchrun's ``RANK``) and ``trainer`` in its
    command line; never the launcher's output shim, which carries the same environment."""
    import psutil

    from airflow_ml_provider.jobs.backends.local.common import JOB_UID_ENV

    uid = json.loads((job_dir / "job.json").read_text())["uid"]
    for proc in psutil.process_iter():
        try:
            env, cmdline = proc.environ(), proc.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if (env.get(JOB_UID_ENV) == uid and env.get(rank_env) == str(rank)
                and trainer in cmdline and not any(arg.endswith("/local/output.py") for arg in cmdline)):
            return proc
    return None


def processes_naming(path: Path) -> list:
    """Live processes (psutil.Process) whose command line names ``path``, but for this one and a backend root's warm
    launcher (``launcher_server``), which outlives its jobs by design; the launchers it forks count."""
    import psutil

    from airflow_ml_provider.jobs.backends.local.launcher_server import SERVER_NAME

    found = []
    for proc in psutil.process_iter(["cmdline", "name"]):
        if (str(path) in " ".join(proc.info["cmdline"] or []) and proc.pid != os.getpid()
                and proc.info["name"] != SERVER_NAME):
            found.append(proc)
    return found


def assert_steps_once(steps: list[int], first: int, last: int, every: int = 1, what: str = "round") -> None:
    """A run's step lines from ``first`` to ``last`` (every ``every``-th) as the bundled trainers print them
    (runtime.metrics_log.StepLines: in order, a burst of 50, then about one a second, and the last): none
    twice, none outside the run, none missing from the burst."""
    assert steps == sorted(set(steps)), f"a {what} was trained twice: {steps}"
    assert steps[0] == first and steps[-1] == last and all((step - first) % every == 0 for step in steps), steps
    burst = steps[:50]
    assert burst == list(range(first, first + every * len(burst), every)), f"a {what} was skipped: {burst}"
