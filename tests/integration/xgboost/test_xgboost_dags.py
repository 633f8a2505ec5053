"""XGBoost through the operator in real DAG runs (dag.test(), local backend, real processes): a user's own
2-worker CommunicatorContext script, whose workers end with byte-identical models, and the bundled trainer with
one worker SIGKILLed mid-training, resubmitted from its last checkpoint within the same Airflow try without
training a round twice."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from pathlib import Path

import pytest

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.preemption import PREEMPTIONS_ENV, RESUME_ENV
from airflow_ml_provider.labels import PREEMPTIONS as PREEMPTIONS_LABEL
from support import assert_steps_once, needs_training_env, rank_process, wait_for

pytestmark = [pytest.mark.integration, needs_training_env]

TRAINER = "airflow_ml_provider.runtime.xgboost_trainer"
ROUNDS = 120  # keep in step with tests/dags/ml_xgboost_test_dags.py


def _events(job_dir: Path, kind: str) -> list[dict]:
    found = []
    log = job_dir / "output.log"
    for line in (log.read_text().splitlines() if log.exists() else []):
        source, _, text = line.partition("] ")
        if text.startswith("{") and (event := json.loads(text)).get("event") == kind:
            found.append({**event, "_source": source.lstrip("[")})
    return found


def _job_dirs(backend: LocalBackend, prefix: str) -> list[Path]:
    jobs = backend.root / "jobs"
    return sorted(d for d in jobs.glob(f"{prefix}*") if "." not in d.name) if jobs.is_dir() else []


def _backend() -> LocalBackend:
    return LocalBackend(Path(os.environ["AIRFLOW_HOME"]) / "ml")


def test_a_users_own_script_trains_through_the_operator_with_byte_identical_models(run_dag):
    result = run_dag("ml_test_xgboost_user_script")
    assert result.state == "success", result.task_states
    train = result.xcom["train"]
    job_dir = _backend().job_dir(train["job_name"])
    log = (job_dir / "output.log").read_text()
    digests = dict(re.findall(r"^\[rank (\d)\] rank=\1 world=2 task_id=\1 sha256=([0-9a-f]{64})$", log, re.M))
    assert set(digests) == {"0", "1"}, log
    model_dir = Path(json.loads((job_dir / "job.json").read_text())["spec"]["model_dir"])
    models = [(model_dir / f"model-{rank}.json").read_bytes() for rank in (0, 1)]
    assert models[0] == models[1] and len(set(digests.values())) == 1


def _kill_rank_1_after_a_checkpoint(backend: LocalBackend, before: set[Path], killed: dict) -> None:
    """Chaos: once the 'preempted' task's first job has checkpointed round 20, SIGKILL its rank 1."""
    job_dir = wait_for(lambda: next((d for d in _job_dirs(backend, "aml-preempted-") if d not in before), None),
                       timeout=900, what="the job")
    wait_for(lambda: max((e["step"] for e in _events(job_dir, "checkpoint")), default=0) >= 20, timeout=900,
             what="a checkpoint of round 20")
    victim = wait_for(lambda: rank_process(job_dir, 1, TRAINER, rank_env="DMLC_TASK_ID"), what="rank 1's process")
    killed["at_step"] = max(e["step"] for e in _events(job_dir, "metrics"))
    victim.send_signal(signal.SIGKILL)
    killed["job_dir"] = job_dir


def test_a_killed_worker_resumes_from_its_checkpoint_without_repeating_rounds(run_dag, capfd):
    backend = _backend()
    killed: dict = {}
    chaos = threading.Thread(target=_kill_rank_1_after_a_checkpoint,
                             args=(backend, set(_job_dirs(backend, "aml-preempted-")), killed), daemon=True)
    chaos.start()
    result = run_dag("ml_test_xgboost_preemption")
    chaos.join(10)
    assert result.state == "success", result.task_states
    assert "job_dir" in killed, "the chaos thread never killed a worker"
    assert killed["at_step"] < ROUNDS, "the job had finished training before the kill"

    job_dir = killed["job_dir"]  # now the resubmitted attempt; the preempted one was archived beside it
    first = job_dir.with_name(job_dir.name + ".1")
    status = json.loads((first / "status.json").read_text())
    assert status["state"] == "PREEMPTED" and status["message"] == "rank 1 was killed by a signal (exit -9)"
    last_checkpoint = _events(first, "checkpoint")[-1]
    record = json.loads((job_dir / "job.json").read_text())
    assert record["labels"][PREEMPTIONS_LABEL] == "1" and record["spec"]["env"][PREEMPTIONS_ENV] == "1"
    assert record["spec"]["env"][RESUME_ENV] == last_checkpoint["path"]
    resumed = _events(job_dir, "resumed")
    assert sorted(event["rank"] for event in resumed) == [0, 1]  # every worker continues from the same booster
    assert {(event["path"], event["step"]) for event in resumed} == {(last_checkpoint["path"], last_checkpoint["step"])}
    trained = [event["step"] for event in _events(job_dir, "metrics")]
    assert_steps_once(trained, last_checkpoint["step"] + 1, ROUNDS)
    [final] = _events(job_dir, "result")
    assert final["num_trees"] == ROUNDS

    auc, reference = result.xcom["preempted"]["metrics"]["auc"], result.xcom["uninterrupted"]["metrics"]["auc"]
    assert reference > 0.9 and abs(auc - reference) <= 0.002, (auc, reference)
    # Continuing from the saved booster retraces the uninterrupted run: the same model, byte for byte.
    uninterrupted = json.loads((backend.job_dir(result.xcom["uninterrupted"]["job_name"]) / "job.json").read_text())
    assert (Path(record["spec"]["model_dir"], "model.ubj").read_bytes()
            == Path(uninterrupted["spec"]["model_dir"], "model.ubj").read_bytes())
    task_log = capfd.readouterr().out
    assert "Resubmitting it (preemption 1 of at most 2; not an Airflow retry), resuming from checkpoint" in task_log
