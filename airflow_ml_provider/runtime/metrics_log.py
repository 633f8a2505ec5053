"""Structured stdout lines (one JSON object per line) that the control side parses from worker logs."""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from dataclasses import dataclass

EVENT_KEY = "event"


def emit(event: str, **fields) -> None:
    """Print one JSON line ``{"event": event, **fields}`` with sorted keys and flush it."""
    sys.stdout.write(json.dumps({EVENT_KEY: event, **fields}, sort_keys=True) + "\n")
    sys.stdout.flush()


def emit_metrics(step: int, loss: float, **metrics: float) -> None:
    """Emit a ``metrics`` line for one step (a boosting round, an optimizer step); the point goes to the job's
    TensorBoard directory too (``runtime.tensorboard``)."""
    values = {"loss": float(loss), **{k: float(v) for k, v in metrics.items()}}
    emit("metrics", step=int(step), **values)
    scalars(int(step), values)


def emit_epoch_metrics(epoch: int, loss: float, **metrics: float) -> None:
    """Emit a ``metrics`` line for one epoch, named ``epoch`` (``step`` is the optimizer's step everywhere,
    as in the checkpoint line: ``checkpoint epoch 1 step 218``); the epoch is the metric's position."""
    values = {"loss": float(loss), **{k: float(v) for k, v in metrics.items()}}
    emit("metrics", epoch=int(epoch), **values)
    scalars(int(epoch), values)


_writer: dict = {}  # "open": the job's TensorBoard writer (None: none, or it failed once)


def scalars(step: int, values: dict[str, float]) -> None:
    """One point of the reporting rank's (rank 0's, the chief's) metrics into ``AIRFLOW_ML_TENSORBOARD_DIR``:
    the writer is opened at the first point and closed at exit; a failure is reported once, never raised."""
    if "open" not in _writer:
        _writer["open"] = None
        try:
            from airflow_ml_provider.runtime import tensorboard

            _writer["open"] = tensorboard.from_env()
        except Exception as exc:  # noqa: BLE001 - TensorBoard's copy must never stop training
            emit("tensorboard", error=f"{type(exc).__name__}: {exc}"[:300])
        if _writer["open"] is not None:
            atexit.register(close_scalars)
    if (writer := _writer["open"]) is not None:
        try:
            writer.add(step, values)
        except Exception as exc:  # noqa: BLE001
            _writer["open"] = None
            emit("tensorboard", error=f"{type(exc).__name__}: {exc}"[:300])


def close_scalars() -> None:
    """Flush and close the TensorBoard writer (uploading its files to object storage); for a trainer that
    ends with ``os._exit``, which runs no ``atexit`` hook."""
    writer = _writer.get("open")
    _writer["open"] = None
    if writer is not None:
        try:
            writer.close()
        except Exception as exc:  # noqa: BLE001
            emit("tensorboard", error=f"{type(exc).__name__}: {exc}"[:300])


def emit_progress(epoch: int, batch: int, batches: int, **metrics: float) -> None:
    """Emit a ``progress`` line inside an epoch (``batch`` of ``batches`` done, running metrics): not a point of
    the epoch curve, a sign of life between epoch lines (a Keras epoch could be a minute of silence)."""
    emit("progress", epoch=int(epoch), batch=int(batch), batches=int(batches), **{k: float(v) for k, v in metrics.items()})


class StepLines:
    """Whether a per-step line (a boosting round's, a batch's progress) is due, one instance per rank: a burst of
    ``burst`` lines first (a short run keeps every point of its curve), then at most one per ``interval_s``
    seconds, and always the last step's. A 10,000-round LightGBM job printed 11,000 lines (1,759 in 90 s)."""

    def __init__(self, interval_s: float = 1.0, burst: int = 50, clock=time.monotonic):
        self.interval_s, self.burst, self.clock = interval_s, burst, clock
        self.tokens, self.then = float(burst), clock()

    def due(self, last: bool = False) -> bool:
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.then) / self.interval_s)
        self.then = now
        if self.tokens < 1 and not last:
            return False
        self.tokens = max(0.0, self.tokens - 1)
        return True


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
