"""How every backend starts an XGBoost job: a tracker (``xgboost.tracker.RabitTracker``) started by the job, and
every worker told where it is by the variables Kubeflow Trainer's xgboost runtime injects: ``DMLC_TRACKER_URI``,
``DMLC_TRACKER_PORT``, ``DMLC_TASK_ID`` (the worker's rank) and ``DMLC_NUM_WORKER``. A user's script joins with
``xgboost.collective.CommunicatorContext(dmlc_tracker_uri=..., dmlc_tracker_port=int(...), dmlc_task_id=...)``
read from them, unchanged from one backend to another.

Where the tracker runs:
- local: a process of the job's own, in the job's sandbox beside its workers (``tracker_argv``), listening on the
  job's loopback. Not in the launcher: the launcher runs outside the job's network namespace, and a tracker on
  the host's loopback is out of the sandboxed workers' reach (their loopback is the job's own; only the
  deployment's ``egress`` endpoints are relayed out). And not inside worker 0: a user's script knows nothing
  of the tracker, and a worker 0 killed mid-training would take the tracker with it, so the job's end would
  be the tracker's confusion instead of the worker's exit. It runs from the job's image, the workers' xgboost.
- ``indexed-job``, ``volcano``: beside worker 0, in its pod (the gate's ``--serve-workers``), bound to every
  address and reached by the others through the job's headless Service (``<job>-0.<job>``, resp. the svc
  plugin's ``<job>-worker-0.<job>``), port ``TRACKER_PORT``.
- ``trainjob``: beside node 0 as well, where Kubeflow Trainer's xgboost plugin says it is: Trainer sets every
  ``DMLC_*`` variable itself (tracker ``<job>-node-0-0.<job>``, port 29500, the task id the pod's completion
  index) and leaves the tracker to the user's code (kubeflow/trainer v2.3.0
  pkg/runtime/framework/plugins/xgboost/xgboost.go:115-144); the gate is that code.
Every worker starts through the gate (``runtime.xgboost_tracker worker``): it waits for the tracker to listen,
then becomes the user's command (``exec``).
"""

from __future__ import annotations

from pathlib import Path

from airflow_ml_provider.runtime import xgboost_tracker

TRACKER_FILE = str(Path(xgboost_tracker.__file__))
TRACKER_PORT = xgboost_tracker.TRACKER_PORT
TRACKER_MODULE = "airflow_ml_provider.runtime.xgboost_tracker"


def worker_env(host: str, port: int, num_workers: int, rank: int | str | None = None) -> dict[str, str]:
    """The ``DMLC_*`` variables of a worker (``rank`` None: the gate sets ``DMLC_TASK_ID`` from its argument)."""
    env = {"DMLC_TRACKER_URI": host, "DMLC_TRACKER_PORT": str(port), "DMLC_NUM_WORKER": str(num_workers)}
    if rank is not None:
        env["DMLC_TASK_ID"] = str(rank)
    return env


def tracker_argv(python: str, num_workers: int, port: int, host: str = "127.0.0.1") -> list[str]:
    """The local job's tracker process, run by the image's ``python`` (whose xgboost the workers use)."""
    return [python, TRACKER_FILE, "serve", "--workers", str(num_workers), "--host", host, "--port", str(port)]


def local_gate(python: str, command: list[str]) -> list[str]:
    """A local worker's argv: the gate, run by ``python`` in isolated mode (it needs the standard library only),
    then the worker's own ``command``."""
    return [python, "-I", "-S", TRACKER_FILE, "worker", "--", *command]


def pod_gate(command: list[str], task_id: str | None, num_workers: int) -> list[str]:
    """A pod's argv: the gate, its rank from the controller's ``$(VAR)`` (``task_id``; None where the controller
    sets ``DMLC_TASK_ID`` itself: Trainer's xgboost plugin), worker 0 serving the tracker, then the user's
    ``command``."""
    rank = ["--task-id", task_id] if task_id is not None else []
    return ["python", "-m", TRACKER_MODULE, "worker", *rank, "--serve-workers", str(num_workers), "--", *command]
