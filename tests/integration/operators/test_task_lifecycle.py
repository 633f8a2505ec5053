"""What happens to a job when its task is killed, or executed a second time while the job runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend, job_processes
from airflow_ml_provider.jobs.state import JobState
from airflow_ml_provider.operators.training import TrainingJobOperator
from support import TEST_DAGS, needs_horovod, wait_for

pytestmark = pytest.mark.integration


def _backend() -> LocalBackend:
    return LocalBackend(Path(os.environ["AIRFLOW_HOME"]) / "ml")




def _running_job_of(dag_id: str, known: set[str]) -> str | None:
    for record in _backend().root.glob("jobs/*/job.json"):
        job = json.loads(record.read_text())
        output = record.parent / "output.log"
        ready = output.exists() and output.read_text().count("] ready") == 2
        if job["name"] not in known and job["labels"]["ml.airflow.apache.org/dag-id"] == dag_id and ready:
            return job["name"]
    return None


@needs_horovod
def test_killing_the_task_stops_every_process_of_its_job(airflow_db):
    """SIGTERM to a running task process is how Airflow kills a task: on_kill must cancel the job."""
    known = {p.parent.name for p in _backend().root.glob("jobs/*/job.json")}
    script = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('dags', {str(TEST_DAGS / 'ml_provider_test_dags.py')!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "module.kill.test()\n"
    )
    task = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        name = wait_for(lambda: _running_job_of("ml_test_kill", known), timeout=300,
                        what="both Horovod ranks to start")  # TensorFlow imports take minutes at load 10
        uid = json.loads((_backend().job_dir(name) / "job.json").read_text())["uid"]
        pids = {p.pid for p in job_processes(uid)}
        pgids = {os.getpgid(pid) for pid in pids}
        assert len(pids) >= 5 and len(pgids) >= 3, "launcher, horovodrun, middlemen and two ranks expected"
        task.send_signal(signal.SIGTERM)
        task.wait(timeout=120)
    finally:
        if task.poll() is None:
            task.kill()
    alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"job processes survived the task: {alive}"
    for pgid in pgids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pgid, 0)
    assert _backend().status(name).state is JobState.CANCELLED
    status = _backend().job_dir(name) / "status.json"  # the launcher's own record, not only the cancel marker
    record = json.loads(wait_for(lambda: status.exists() and status.read_text(), what="the launcher's record"))
    assert record["state"] == "CANCELLED", record  # before (issue 18): PREEMPTED, "rank 0 was killed by a signal"


def test_a_second_execution_attaches_to_the_running_job():
    """A retry or a restarted worker executes the same task instance again while its job runs."""
    token = f"started-{uuid.uuid4().hex}"  # written into the job's own model directory, where it may write
    command = ["python", "-c", f"import os, time; open(os.path.join(os.environ['AIRFLOW_ML_MODEL_DIR'], {token!r}), "
               "'a').write('x'); time.sleep(4); print('done')"]

    def marker():
        return next(iter(_backend().root.glob(f"artifacts/*/model/{token}")), None)

    run_id = f"manual__{uuid.uuid4().hex}"  # a fresh task instance, whatever earlier runs left in AIRFLOW_HOME
    pushed: list[tuple[str, object]] = []  # the XComs both executions save (the job's TensorBoard directory, the view)
    ti = {"dag_id": "d", "task_id": "train", "run_id": run_id, "map_index": -1,
          "xcom_push": lambda key, value: pushed.append((key, value))}
    context = {"ti": SimpleNamespace(**ti, try_number=1)}
    retry = {"ti": SimpleNamespace(**ti, try_number=2)}
    results = {}

    def run(key, ctx):
        results[key] = TrainingJobOperator(task_id="train", command=command, num_workers=1,
                                           follow={"poll_interval": 0.2}).execute(ctx)

    first = threading.Thread(target=run, args=("first", context))
    first.start()
    wait_for(marker, what="the job to start")
    second = threading.Thread(target=run, args=("second", retry))
    second.start()
    first.join(60)
    second.join(60)
    assert results["first"] == results["second"] and results["first"]["state"] == "SUCCEEDED"
    assert marker().read_text() == "x", "the job ran more than once"
    name = results["first"]["job_name"]
    boards = {value for key, value in pushed if key == "ml_tensorboard_dir"}
    assert len(boards) == 1 and f"/artifacts/{name}/checkpoints/tensorboard" in boards.pop(), "one job, one directory"
    assert not list(_backend().root.glob(f"jobs/{name}.*")), "a second job was submitted"
