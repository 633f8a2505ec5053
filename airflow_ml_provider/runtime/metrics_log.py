"""Structured stdout lines (one JSON object per line) that the control side parses from worker logs."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

EVENT_KEY = "event"


def emit(event: str, **fields) -> None:
    """Print one JSON line ``{"event": event, **fields}`` with sorted keys and flush it."""
    sys.stdout.write(json.dumps({EVENT_KEY: event, **fields}, sort_keys=True) + "\n")
    sys.stdout.flush()


def emit_metrics(step: int, loss: float, **metrics: float) -> None:
    """Emit a ``metrics`` line for one step (a boosting round, an optimizer step)."""
    emit("metrics", step=int(step), loss=float(loss), **{k: float(v) for k, v in metrics.items()})


def emit_epoch_metrics(epoch: int, loss: float, **metrics: float) -> None:
    """Emit a ``metrics`` line for one epoch, named ``epoch`` (``step`` is the optimizer's step everywhere,
    as in the checkpoint line: ``checkpoint epoch 1 step 218``); the epoch is the metric's position."""
    emit("metrics", epoch=int(epoch), loss=float(loss), **{k: float(v) for k, v in metrics.items()})


@dataclass(frozen=True)
class WorkerEnv:
    """This worker's place in the job, as the backend described it through environment variables."""

    rank: int
    num_workers: int
    machines: list[str]
    local_port: int | None
    model_dir: str | None
    checkpoint_dir: str | None


def worker_env() -> WorkerEnv:
    """Read the ``AIRFLOW_ML_*`` variables; on Kubernetes the rank is the pod's index, set by the
    Indexed Job controller (``JOB_COMPLETION_INDEX``) or Volcano's env plugin (``VC_TASK_INDEX``), or for a
    rank that horovodrun started (a generic job on mpijob) ``HOROVOD_RANK``, which comes first: horovodrun
    passes its own pod's variables on to every rank."""
    env = os.environ
    port = env.get("AIRFLOW_ML_LOCAL_PORT")
    machines = env.get("AIRFLOW_ML_MACHINES", "")
    return WorkerEnv(
        rank=int(env.get("AIRFLOW_ML_RANK") or env.get("HOROVOD_RANK") or env.get("JOB_COMPLETION_INDEX")
                 or env.get("VC_TASK_INDEX") or 0),
        num_workers=int(env.get("AIRFLOW_ML_NUM_WORKERS", "1")),
        machines=[m.strip() for m in machines.split(",") if m.strip()],
        local_port=int(port) if port else None,
        model_dir=env.get("AIRFLOW_ML_MODEL_DIR") or None,
        checkpoint_dir=env.get("AIRFLOW_ML_CHECKPOINT_DIR") or None,
    )
