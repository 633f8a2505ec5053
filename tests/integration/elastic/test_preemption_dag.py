"""A fixed-size Horovod job preempted mid-training inside a real DAG run (dag.test()): the operator
resubmits it from its last checkpoint within the same Airflow try, and the model ends up as good as
an uninterrupted run's."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest
from elastic_support import events, job_dirs, last_step

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.preemption import PREEMPTIONS_ENV, RESUME_ENV
from airflow_ml_provider.labels import PREEMPTIONS as PREEMPTIONS_LABEL
from support import needs_horovod, rank_process, wait_for

pytestmark = pytest.mark.integration

TRAINER = "airflow_ml_provider.runtime.horovod_keras"
EPOCHS = 8  # keep in step with tests/dags/ml_elastic_test_dags.py


def _kill_rank_1_after_a_checkpoint(backend: LocalBackend, before: set[Path], killed: dict) -> None:
    """Chaos: once the 'preempted' task's first job has checkpointed epoch 3, SIGKILL its rank 1."""
    job_dir = wait_for(lambda: next((d for d in job_dirs(backend, "aml-preempted-")
                                     if d not in before and "." not in d.name), None), timeout=900, what="the job")
    wait_for(lambda: last_step(job_dir, "checkpoint", "epoch") >= 3, timeout=900, what="a checkpoint of epoch 3")
    victim = wait_for(lambda: rank_process(job_dir, 1, TRAINER), what="rank 1's process")
    victim.send_signal(signal.SIGKILL)
    killed["job_dir"] = job_dir


def _final_weights(job_dir: Path) -> set[str]:
    return {event["checksum"] for event in events(job_dir, "weights_checksum")}


def _try_number(dag_id: str, run_id: str, task_id: str) -> int:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        return session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=run_id, task_id=task_id).one().try_number


@needs_horovod
def test_a_preempted_job_resumes_from_its_checkpoint_without_an_airflow_retry(run_dag, capfd):
    backend = LocalBackend(Path(os.environ["AIRFLOW_HOME"]) / "ml")
    killed: dict = {}
    chaos = threading.Thread(target=_kill_rank_1_after_a_checkpoint,
                             args=(backend, set(job_dirs(backend, "aml-preempted-")), killed), daemon=True)
    chaos.start()
    result = run_dag("ml_test_preemption")
    chaos.join(10)
    assert result.state == "success", result.task_states
    assert "job_dir" in killed, "the chaos thread never killed a worker"
    assert _try_number("ml_test_preemption", result.run_id, "preempted") == 1, "an Airflow retry was spent"

    job_dir = killed["job_dir"]  # now the resubmitted attempt; the preempted one was archived beside it
    first = job_dir.with_name(job_dir.name + ".1")
    assert json.loads((first / "status.json").read_text())["state"] == "PREEMPTED"
    last_checkpoint = events(first, "checkpoint")[-1]
    record = json.loads((job_dir / "job.json").read_text())
    assert record["labels"][PREEMPTIONS_LABEL] == "1" and record["spec"]["env"][PREEMPTIONS_ENV] == "1"
    assert record["spec"]["env"][RESUME_ENV] == last_checkpoint["path"]
    [resumed] = [event for event in events(job_dir, "resumed") if event["rank"] == 0]
    assert (resumed["epoch"], resumed["path"]) == (last_checkpoint["epoch"], last_checkpoint["path"])
    assert resumed["step"] == last_checkpoint["step"]
    trained = [event["epoch"] for event in events(job_dir, "metrics")]
    assert trained == list(range(last_checkpoint["epoch"] + 1, EPOCHS + 1)), "an epoch was trained twice or skipped"

    accuracy = result.xcom["preempted"]["metrics"]["accuracy"]
    reference = result.xcom["uninterrupted"]["metrics"]["accuracy"]
    assert reference > 0.9 and abs(accuracy - reference) <= 0.02, (accuracy, reference)
    # Checkpoints hold the optimizer state and the data order depends on (seed, rank, epoch) only, so the
    # resumed run retraces the uninterrupted one exactly: the same weights, bit for bit.
    uninterrupted = backend.job_dir(result.xcom["uninterrupted"]["job_name"])
    assert _final_weights(job_dir) == _final_weights(uninterrupted)
    task_log = capfd.readouterr().out
    assert "Resubmitting it (preemption 1 of at most 2; not an Airflow retry), resuming from checkpoint" in task_log
    assert f"at step {last_checkpoint['step']}, epoch {last_checkpoint['epoch']}" in task_log
