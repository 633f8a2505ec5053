"""Operators that run a distributed training job on any backend and wait for it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from airflow_ml_provider.jobs.spec import Framework
from airflow_ml_provider.operators.base_job import BaseJobOperator
from airflow_ml_provider.operators.config import (
    JobRequest,
    OnFinish,
    TrainingJobFailed,
    TrainingOutputs,
    as_dict,
)

__all__ = ["BaseTrainingOperator", "HorovodTrainingOperator", "LightGBMTrainingOperator", "OnFinish",
           "PyTorchTrainingOperator", "TrainingJobFailed", "TrainingJobOperator", "XGBoostTrainingOperator"]


class BaseTrainingOperator(BaseJobOperator):
    """Submits one training job, streams its workers' lines into the task log, returns a summary.

    Following the job (lines, rules, metrics, preemptions) is the follow core's (``jobs.follow``),
    driven here synchronously or, when deferrable, by ``TrainingJobTrigger`` in the triggerer.

    A task re-executed while its job is still running (a retry, a restarted worker) attaches to that
    job instead of starting a second one: the job's name is derived from dag/task/run/map index.

    A job that ends PREEMPTED (evicted pods, a worker killed from outside) is resubmitted under the
    same name, up to ``follow.max_preemptions`` times, without spending an Airflow retry: the attempt
    carries ``AIRFLOW_ML_PREEMPTIONS`` and ``AIRFLOW_ML_RESUME_FROM`` (the last checkpoint its log
    reported). A FAILED job (the user's code exited non-zero) is never resubmitted this way.

    Clear means retrain: a new try of a task whose job already SUCCEEDED (the task was cleared, or
    the DAG run re-run) starts a fresh job with its own, empty model and checkpoint directories
    (``retrain-<k>/`` under the job's artifact directory, k = 1, 2, ...), so it trains from scratch and
    its model is a new one (the evaluation and the registry see a new model); earlier models stay. A new
    try after a failed, cancelled or preempted job resumes from that job's checkpoints, as before.

    ``execution_timeout`` is also the job's deadline: the backend stops an attempt that outlives it
    (the local launcher; ``activeDeadlineSeconds`` on Kubernetes), and the follower stops the job and
    fails the task when it passes.

    With an Elasticsearch connection (``elasticsearch_conn_id``, else the training connection's extra of
    that name), the job's lines and metrics are read from the pods' logs in Elasticsearch instead of
    the backend (see ElasticsearchLogsHook); an Elasticsearch outage shorter than 10 minutes only delays them.

    Args:
        command: the worker argv, run once per worker; templated.
        num_workers: how many workers; templated.
        outputs: the job's own model/checkpoint directories
            (:class:`~airflow_ml_provider.operators.config.TrainingOutputs` or its dict; default: the job's
            under the artifact root); templated.
        job, follow, on_finish, ml_conn_id, elasticsearch_conn_id, deferrable: see
            :class:`~airflow_ml_provider.operators.base_job.BaseJobOperator`.

    Returns (XCom): ``{"job_name", "backend", "state", "metrics", "model_path", "image"}``.
    """

    framework: Framework
    template_fields: Sequence[str] = ("command", "num_workers", "outputs", *BaseJobOperator.template_fields)
    template_fields_renderers = {"command": "json", "outputs": "json", **BaseJobOperator.template_fields_renderers}
    ui_color = "#d6eaf8"

    def __init__(self, *, command: list[str] | None = None, num_workers: int = 1,
                 outputs: TrainingOutputs | dict[str, Any] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.command = command
        self.num_workers = num_workers
        try:
            self.outputs = as_dict(TrainingOutputs, outputs, "outputs")
        except ValueError as exc:
            raise ValueError(f"{self.task_id}: {exc}") from None

    def build_command(self) -> list[str] | None:
        """The worker argv; subclasses that know their trainer build it from their own arguments."""
        return self.command

    def job_request(self) -> JobRequest:
        return JobRequest(self.framework, self.build_command(), self.num_workers)

    def job_outputs(self) -> dict[str, Any]:
        return self.outputs


class TrainingJobOperator(BaseTrainingOperator):
    """Any distributed job: ``command`` runs once per worker with ``AIRFLOW_ML_RANK``,
    ``AIRFLOW_ML_NUM_WORKERS`` and ``AIRFLOW_ML_MACHINES`` in its environment.

    Args:
        command: the worker argv; templated.
        framework: how the workers are started (``generic``, ``horovod``, ``lightgbm``, ``pytorch``, ``xgboost``).
        num_workers, outputs: see :class:`BaseTrainingOperator`.
        job, follow, on_finish, ml_conn_id, elasticsearch_conn_id, deferrable: see
            :class:`~airflow_ml_provider.operators.base_job.BaseJobOperator`.
    """

    def __init__(self, *, command: list[str], framework: Framework | str = Framework.GENERIC, **kwargs: Any):
        super().__init__(command=command, **kwargs)
        self.framework = Framework(framework)


class HorovodTrainingOperator(BaseTrainingOperator):
    """Data-parallel Horovod (ring-allreduce) training: ``command`` runs once per rank.

    On the local backend the ranks are started by ``horovodrun`` with Gloo on localhost, from the
    job's image (a Python environment with TensorFlow and Horovod). With ``min_workers``/``max_workers``
    the job is elastic (``horovodrun --min-np/--max-np`` with host discovery): workers may leave and
    join while it runs.

    Args:
        command: the worker argv (default: the bundled trainer, ``runtime.horovod_elastic`` for an
            elastic job, else ``runtime.horovod_keras``); templated.
        min_workers, max_workers: the elastic job's bounds (``num_workers`` is its initial size).
        num_workers, outputs: see :class:`BaseTrainingOperator`.
        job, follow, on_finish, ml_conn_id, elasticsearch_conn_id, deferrable: see
            :class:`~airflow_ml_provider.operators.base_job.BaseJobOperator`.
    """

    framework = Framework.HOROVOD

    def __init__(self, *, command: list[str] | None = None, min_workers: int | None = None,
                 max_workers: int | None = None, **kwargs: Any):
        super().__init__(command=command, **kwargs)
        self.min_workers = min_workers
        self.max_workers = max_workers

    def build_command(self) -> list[str]:
        elastic = self.min_workers is not None or self.max_workers is not None
        trainer = "horovod_elastic" if elastic else "horovod_keras"
        return self.command if self.command is not None else ["python", "-m", f"airflow_ml_provider.runtime.{trainer}"]

    def job_request(self) -> JobRequest:
        return JobRequest(self.framework, self.build_command(), self.num_workers, self.min_workers, self.max_workers)


class LightGBMTrainingOperator(BaseTrainingOperator):
    """LightGBM's own socket-based data-parallel training: one process per worker, each loading only
    its shard of ``train_data``; rank 0 saves the model and reports the validation metrics.

    Args:
        train_data: .npz (X, y) or .csv file(s) with a ``label`` column, readable by every worker; templated.
        lightgbm_params: LightGBM parameters (not named ``params``: Airflow merges the DAG's Params into
            any operator argument of that name); templated.
        valid_data: the validation set, same formats; templated.
        num_boost_round: boosting rounds; templated.
        command: the trainer's argv before its data arguments (default: ``runtime.lightgbm_trainer``).
        num_workers, outputs: see :class:`BaseTrainingOperator`.
        job, follow, on_finish, ml_conn_id, elasticsearch_conn_id, deferrable: see
            :class:`~airflow_ml_provider.operators.base_job.BaseJobOperator`.
    """

    framework = Framework.LIGHTGBM
    template_fields: Sequence[str] = (*BaseTrainingOperator.template_fields, "train_data", "valid_data",
                                      "lightgbm_params", "num_boost_round")
    template_fields_renderers = {**BaseTrainingOperator.template_fields_renderers, "lightgbm_params": "json"}

    def __init__(self, *, train_data: str, lightgbm_params: dict[str, Any] | None = None,
                 valid_data: str | None = None, num_boost_round: int = 100, **kwargs: Any):
        super().__init__(**kwargs)
        self.train_data = train_data
        self.valid_data = valid_data
        self.lightgbm_params = lightgbm_params or {}
        self.num_boost_round = num_boost_round

    def build_command(self) -> list[str]:
        command = self.command or ["python", "-m", "airflow_ml_provider.runtime.lightgbm_trainer"]
        command = [*command, "--train-data", self.train_data, "--params-json", json.dumps(self.lightgbm_params),
                   "--num-boost-round", str(self.num_boost_round)]
        return command + (["--valid-data", self.valid_data] if self.valid_data else [])


class PyTorchTrainingOperator(BaseTrainingOperator):
    """PyTorch DDP under ``torchrun``: one torchrun agent per worker (c10d rendezvous), each starting
    ``nproc_per_node`` ranks (one per GPU of a node; 1 on CPU), which see ``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT`` besides the ``AIRFLOW_ML_*`` variables.

    With ``min_workers``/``max_workers`` the job is elastic (``--nnodes=MIN:MAX`` and
    ``--max-restarts``, see ``jobs.torchrun``): a lost rank re-forms the group, which resumes from the
    newest checkpoint.

    Args:
        command: the worker argv (default: the bundled trainer, ``runtime.torch_ddp``); templated.
        min_workers, max_workers: the elastic job's bounds (``num_workers`` is its initial size).
        nproc_per_node: ranks per worker (one per GPU of a node; 1 on CPU).
        num_workers, outputs: see :class:`BaseTrainingOperator`.
        job, follow, on_finish, ml_conn_id, elasticsearch_conn_id, deferrable: see
            :class:`~airflow_ml_provider.operators.base_job.BaseJobOperator`.
    """

    framework = Framework.PYTORCH

    def __init__(self, *, command: list[str] | None = None, min_workers: int | None = None,
                 max_workers: int | None = None, nproc_per_node: int = 1, **kwargs: Any):
        super().__init__(command=command, **kwargs)
        self.min_workers = min_workers
        self.max_workers = max_workers
        self.nproc_per_node = nproc_per_node

    def build_command(self) -> list[str]:
        return self.command if self.command is not None else ["python", "-m", "airflow_ml_provider.runtime.torch_ddp"]

    def job_request(self) -> JobRequest:
        return JobRequest(self.framework, self.build_command(), self.num_workers, self.min_workers, self.max_workers,
                          nproc_per_node=self.nproc_per_node)


class XGBoostTrainingOperator(BaseTrainingOperator):
    """Distributed XGBoost (``hist``, its collective): one process per worker, the job's tracker started by the
    backend (``jobs.xgboost``), each worker seeing ``DMLC_TRACKER_URI``, ``DMLC_TRACKER_PORT``, ``DMLC_TASK_ID``
    and ``DMLC_NUM_WORKER`` as under Kubeflow Trainer's xgboost runtime. By default the bundled trainer
    (``runtime.xgboost_trainer``): each worker loads its shard of ``train_data``, rank 0 reports the validation
    metrics and saves the model; with ``command`` (and no ``train_data``) the user's own script runs as it is,
    e.g. one that joins with ``xgboost.collective.CommunicatorContext``.

    Args:
        train_data: .npz (X, y) or .csv file(s) with a ``label`` column, readable by every worker; templated.
        xgboost_params: XGBoost parameters (not named ``params``: Airflow merges the DAG's Params into any
            operator argument of that name); templated.
        valid_data: the validation set, same formats; templated.
        num_boost_round: boosting rounds; templated.
        command: the trainer's argv before its data arguments (default: ``runtime.xgboost_trainer``), or with no
            ``train_data`` the whole worker argv.
        num_workers, outputs: see :class:`BaseTrainingOperator`.
        job, follow, on_finish, ml_conn_id, elasticsearch_conn_id, deferrable: see
            :class:`~airflow_ml_provider.operators.base_job.BaseJobOperator`.
    """

    framework = Framework.XGBOOST
    template_fields: Sequence[str] = (*BaseTrainingOperator.template_fields, "train_data", "valid_data",
                                      "xgboost_params", "num_boost_round")
    template_fields_renderers = {**BaseTrainingOperator.template_fields_renderers, "xgboost_params": "json"}

    def __init__(self, *, train_data: str | None = None, xgboost_params: dict[str, Any] | None = None,
                 valid_data: str | None = None, num_boost_round: int = 100, **kwargs: Any):
        super().__init__(**kwargs)
        if train_data is None and kwargs.get("command") is None:
            raise ValueError(f"{self.task_id}: train_data: the bundled trainer needs it (or give your own command)")
        self.train_data = train_data
        self.valid_data = valid_data
        self.xgboost_params = xgboost_params or {}
        self.num_boost_round = num_boost_round

    def build_command(self) -> list[str]:
        if self.train_data is None:  # the user's own script, unchanged
            return self.command
        command = self.command or ["python", "-m", "airflow_ml_provider.runtime.xgboost_trainer"]
        command = [*command, "--train-data", self.train_data, "--params-json", json.dumps(self.xgboost_params),
                   "--num-boost-round", str(self.num_boost_round)]
        return command + (["--valid-data", self.valid_data] if self.valid_data else [])
