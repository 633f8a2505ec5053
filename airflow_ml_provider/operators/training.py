"""Operators that run a distributed training job on any backend and wait for it."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from enum import Enum
from functools import cached_property
from typing import Any, ClassVar

from airflow.sdk import BaseOperator, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_ml_provider.artifacts import job_dirs
from airflow_ml_provider.hooks.elasticsearch_logs import job_log_source
from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.jobs.backends.base import Backend, JobNotFound, JobSubmissionError
from airflow_ml_provider.jobs.drivers import SyncDriver, job_options
from airflow_ml_provider.jobs.follow import Action, Follower, FollowOptions, Step
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.preemption import resubmit
from airflow_ml_provider.jobs.spec import (
    Framework,
    KubernetesOptions,
    Resources,
    Scheduling,
    SpecError,
    TrainingJobSpec,
)
from airflow_ml_provider.jobs.state import JobState
from airflow_ml_provider.logs.rules import LogRules
from airflow_ml_provider.logs.source import LogSource
from airflow_ml_provider.observability import job_metrics
from airflow_ml_provider.operators.links import job_links
from airflow_ml_provider.triggers.durable import task_key
from airflow_ml_provider.triggers.training_job import TrainingJobTrigger


class OnFinish(str, Enum):
    """What to do with the job's record once the task is done (artifacts are always kept)."""

    KEEP = "keep"
    DELETE = "delete"
    DELETE_SUCCEEDED = "delete_succeeded"


class TrainingJobFailed(AirflowException):
    """The job ended without succeeding; retryable, since workers fail for infrastructure reasons too."""


class BaseTrainingOperator(BaseOperator):
    """Submits one TrainingJobSpec, streams its workers' lines into the task log, returns a summary.

    Following the job (lines, rules, metrics, preemptions) is the follow core's (``jobs.follow``),
    driven here synchronously or, when deferrable, by ``TrainingJobTrigger`` in the triggerer.

    A task re-executed while its job is still running (a retry, a restarted worker) attaches to that
    job instead of starting a second one: the job's name is derived from dag/task/run/map index.

    A job that ends PREEMPTED (evicted pods, a worker killed from outside) is resubmitted under the
    same name, up to ``max_preemptions`` times, without spending an Airflow retry: the attempt carries
    ``AIRFLOW_ML_PREEMPTIONS`` and ``AIRFLOW_ML_RESUME_FROM`` (the last checkpoint its log reported).
    A FAILED job (the user's code exited non-zero) is never resubmitted this way. Where Kueue admits
    jobs (the connection's ``queueing: kueue``), a job Kueue evicts is requeued by Kueue itself: the
    task waits for the same job to be admitted again, and ``max_queue_s`` bounds each wait for admission.

    Clear means retrain: a new try of a task whose job already SUCCEEDED (the task was cleared, or
    the DAG run re-run) starts a fresh job with its own, empty model and checkpoint directories
    (``retrain-<k>/`` under the job's artifact directory, k = 1, 2, ...), so it trains from scratch and
    its model is a new one (the evaluation and the registry see a new model); earlier models stay. A new try after a failed, cancelled or
    preempted job resumes from that job's checkpoints, as before.

    ``execution_timeout`` is also the job's deadline: the backend stops an attempt that outlives it
    (the local launcher; ``activeDeadlineSeconds`` on Kubernetes), and the follower stops the job and
    fails the task when it passes.

    With an Elasticsearch connection (``elasticsearch_conn_id``, else the training connection's extra of
    that name), the job's lines and metrics are read from the pods' logs in Elasticsearch instead of
    the backend (see ElasticsearchLogsHook); an Elasticsearch outage shorter than 10 minutes only delays them.

    Returns (XCom): ``{"job_name", "backend", "state", "metrics", "model_path"}``.
    """

    framework: ClassVar[Framework]
    min_workers: int | None = None  # elastic bounds: Horovod and PyTorch jobs take them
    max_workers: int | None = None
    nproc_per_node: int = 1  # ranks per worker: PyTorch only (PyTorchTrainingOperator)
    template_fields: Sequence[str] = ("command", "num_workers", "env", "image", "backend", "model_dir", "checkpoint_dir",
                                      "working_dir", "manifest")
    template_fields_renderers = {"command": "json", "env": "json", "manifest": "yaml"}
    operator_extra_links = job_links()  # Kibana/Grafana, only those whose URL templates are configured
    ui_color = "#d6eaf8"

    def __init__(
        self,
        *,
        command: list[str] | None = None,
        num_workers: int = 1,
        backend: str | None = None,
        image: str | None = None,
        env: dict[str, str] | None = None,
        resources: Resources | dict | None = None,
        scheduling: Scheduling | dict | None = None,
        kubernetes: KubernetesOptions | dict | None = None,
        working_dir: str | None = None,
        model_dir: str | None = None,
        checkpoint_dir: str | None = None,
        max_preemptions: int = 3,
        max_queue_s: float | None = None,
        fail_on: list[str] | None = None,
        retry_on: list[str] | None = None,
        ml_conn_id: str = TrainingBackendHook.default_conn_name,
        elasticsearch_conn_id: str | None = None,
        on_finish: OnFinish | str = OnFinish.KEEP,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 1.0,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.command = command
        self.num_workers = num_workers
        self.backend = backend
        self.image = image
        self.env = env or {}
        self.job_resources = resources  # not self.resources: BaseOperator turns that into its own Resources
        self.scheduling = scheduling
        self.kubernetes = kubernetes
        self.working_dir = working_dir
        self.manifest = ""  # filled at render time: what the backend will create, for the rendered view
        self.model_dir = model_dir
        self.checkpoint_dir = checkpoint_dir
        self.max_preemptions = max_preemptions
        if max_queue_s is not None and not max_queue_s > 0:
            raise ValueError(f"max_queue_s: must be a positive number of seconds (got {max_queue_s!r})")
        self.max_queue_s = max_queue_s
        self.fail_on = list(fail_on or [])
        self.retry_on = list(retry_on or [])
        LogRules(fail_on=self.fail_on, retry_on=self.retry_on)  # bad regexes fail at parse time
        self.ml_conn_id = ml_conn_id
        self.elasticsearch_conn_id = elasticsearch_conn_id
        self.on_finish = OnFinish(on_finish)
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self._job: tuple[Backend, str] | None = None
        self._generation: str | None = None  # "retrain-<k>": the directories of the latest fresh start

    @cached_property
    def hook(self) -> TrainingBackendHook:
        return TrainingBackendHook(self.ml_conn_id)

    @cached_property
    def logs_conn_id(self) -> str | None:
        """The Elasticsearch connection the job's log is read from, if one is configured."""
        return self.elasticsearch_conn_id or self.hook.extras().get("elasticsearch_conn_id")

    def build_command(self) -> list[str] | None:
        """The worker argv; subclasses that know their trainer build it from their own arguments."""
        return self.command

    def artifact_dirs(self, backend: Backend, name: str) -> tuple[str | None, str | None]:
        """(model dir, checkpoint dir): the task's own, else the job's under the artifact root; those of
        the latest fresh start (``retrain-<k>``) once a try retrained after a succeeded job."""
        artifacts = self.hook.job_artifact_dir(backend, name)
        if (generation := self._generation) and artifacts:
            artifacts = f"{artifacts}/{generation}"
        defaults = job_dirs(artifacts)
        return (self.model_dir and _below(self.model_dir, generation) or defaults.get("model_dir"),
                self.checkpoint_dir and _below(self.checkpoint_dir, generation) or defaults.get("checkpoint_dir"))

    def _choose_generation(self, backend: Backend, identity: JobIdentity) -> str | None:
        """Whether this try trains from scratch (its job already succeeded: the next ``retrain-<k>``)
        or continues the latest start's directories (a first try, or resuming a failed attempt)."""
        try:
            succeeded = backend.status(identity.name).state is JobState.SUCCEEDED
        except JobNotFound:
            succeeded = False
        latest = self._latest_generation(backend, identity.name)
        if not succeeded:
            return f"retrain-{latest}" if latest else None
        generation = f"retrain-{latest + 1}"
        self.log.info("Job %s already succeeded (the task was cleared or its DAG run re-run): this try retrains "
                      "from scratch as a new job, with empty model and checkpoint directories (%s/)",
                      identity.name, generation)
        return generation

    def _latest_generation(self, backend: Backend, name: str) -> int:
        """The k of the newest ``retrain-<k>`` directory, 0 if none (the first start's directories)."""
        root = self.checkpoint_dir or self.hook.job_artifact_dir(backend, name)
        store = self.hook.artifact_store(backend.name)
        if not root or store is None:
            return 0
        try:
            names = [entry.name for entry in store.locate(root).iterdir()]
        except (FileNotFoundError, NotADirectoryError):
            return 0
        return max((int(match.group(1)) for n in names if (match := _GENERATION.fullmatch(n))), default=0)

    def job_inputs(self) -> list[str]:
        """What the job reads from other jobs' directories (see ``TrainingJobSpec.inputs``): none here."""
        return []

    def build_spec(self, backend: Backend, name: str) -> TrainingJobSpec:
        model_dir, checkpoint_dir = self.artifact_dirs(backend, name)
        storage = self.hook.job_environment(backend.name, check=False)  # the store is checked at submission
        timeout = self.execution_timeout.total_seconds() if self.execution_timeout else None
        try:
            return TrainingJobSpec(
                framework=self.framework,
                command=self.build_command(),
                num_workers=self.num_workers,
                image=self.image or self.hook.default_image(backend.name, self.framework.value),
                resources=self.job_resources or Resources(),
                scheduling=self.scheduling or Scheduling(),
                kubernetes=storage.merged_kubernetes(self.kubernetes),
                env=storage.merged_env(self.env),
                working_dir=self.working_dir,
                model_dir=model_dir,
                checkpoint_dir=checkpoint_dir,
                min_workers=self.min_workers,
                max_workers=self.max_workers,
                nproc_per_node=self.nproc_per_node,
                timeout_s=max(1, int(timeout)) if timeout else None,
                inputs=self.job_inputs(),
            )
        except SpecError as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}") from None

    def follow_options(self, backend: Backend, name: str, spec: TrainingJobSpec, source: LogSource) -> FollowOptions:
        """How this task follows its job through ``source`` (the job was just submitted)."""
        return job_options(self.base_follow_options(), backend, name, spec, source)

    def base_follow_options(self) -> FollowOptions:
        """This task's log rules, preemption budget and poll interval: a search applies them to its trials."""
        return FollowOptions(rules={"fail_on": self.fail_on, "retry_on": self.retry_on},
                             max_preemptions=self.max_preemptions, max_queue_s=self.max_queue_s,
                             poll_interval=self.poll_interval)

    def _source(self, backend: Backend, name: str) -> LogSource:
        """The job's log, built once per attempt (at submission, at each resubmission): the follow
        options, the resubmission and the sync driver all read that one."""
        return job_log_source(backend, name, self.logs_conn_id)

    def render_template_fields(self, context, jinja_env=None) -> None:
        """Also render the job's manifest (or local launch plan), so the UI's rendered view shows exactly
        what is submitted. Secrets appear only as Secret references."""
        super().render_template_fields(context, jinja_env)
        identity = JobIdentity.from_context(context)
        backend = self.hook.get_backend(self.backend)
        self.manifest = backend.render(identity.name, self.build_spec(backend, identity.name), identity.labels())

    def execute(self, context) -> dict[str, Any]:
        identity = JobIdentity.from_context(context)
        backend = self.hook.get_backend(self.backend)
        environment = self.hook.job_environment(backend.name)  # checks the artifact store before anything reads it
        self._generation = self._choose_generation(backend, identity)
        spec = self.build_spec(backend, identity.name)
        self._job = (backend, identity.name)  # set first: a kill during submission still cancels the job
        try:
            started = backend.submit(identity.name, spec, identity.labels(), **environment.submit_kwargs())
        except JobSubmissionError as exc:
            raise AirflowFailException(f"{self.task_id}: backend {backend.name} refused the job: {exc}") from None
        self.log.info("%s job %s on backend %s with %d worker(s): %s",
                      "Submitted" if started else "Attached to the already running",
                      identity.name, backend.name, spec.num_workers, json.dumps(spec.command))
        source = self._source(backend, identity.name)
        follower = Follower(self.follow_options(backend, identity.name, spec, source))
        return self._follow(context, backend, identity.name, follower, source)

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        backend = self.hook.get_backend(self.backend)
        name = event["job_name"]
        self._job = (backend, name)
        follower = Follower(FollowOptions.from_dict(event["options"]), event["state"])
        return self._conclude(context, backend, name, follower, Step.from_dict(event))

    def _follow(self, context, backend: Backend, name: str, follower: Follower, source: LogSource) -> dict[str, Any]:
        """Wait for the job (in the triggerer when deferrable), then act on the follower's decision."""
        metrics = job_metrics(context, name, self.framework.value)
        if self.deferrable:
            self.defer(
                trigger=TrainingJobTrigger(name, backend.name, self.ml_conn_id, options=follower.options.to_dict(),
                                           state=follower.state, elasticsearch_conn_id=self.logs_conn_id,
                                           state_key=task_key(context), metric_tags=metrics.tags),
                method_name="execute_complete",
            )
        step = SyncDriver(follower, self.log, backend, name, source, on_step=metrics).run()
        return self._conclude(context, backend, name, follower, step)

    def _conclude(self, context, backend: Backend, name: str, follower: Follower, step: Step) -> dict[str, Any]:
        if step.action is Action.RESUBMIT:
            return self._resubmit(context, backend, name, follower, step)
        state = step.status.state if step.status else JobState.FAILED
        try:
            if step.action is Action.FINISH:
                self.log.info("Job %s succeeded; final metrics: %s", name, json.dumps(follower.metrics))
                return {"job_name": name, "backend": backend.name, "state": state.value,
                        "metrics": follower.metrics, "image": self._image(backend),
                        "model_path": follower.model_path or self.artifact_dirs(backend, name)[0]}
            message = follower.failure(f"{self.task_id}: job {name}: {step.message}")
            if not step.retryable:
                raise AirflowFailException(message)
            raise TrainingJobFailed(message)
        finally:
            if self.on_finish is OnFinish.DELETE or (
                self.on_finish is OnFinish.DELETE_SUCCEEDED and step.action is Action.FINISH
            ):
                backend.delete(name)
            self._job = None

    def _image(self, backend: Backend) -> str | None:
        """The image the job ran (lineage): the task's, the connection's, else the local backend's environment."""
        return (self.image or self.hook.default_image(backend.name, self.framework.value)
                or getattr(backend, "image", None))

    def _resubmit(self, context, backend: Backend, name: str, follower: Follower, step: Step) -> dict[str, Any]:
        """Start the preempted job again under its name, told where to resume; no Airflow retry is spent."""
        base = self.build_spec(backend, name)
        self.log.warning(
            "Job %s was preempted (%s). Resubmitting it (preemption %d of at most %d; not an Airflow retry), "
            "resuming from %s", name, step.message, follower.preemptions, self.max_preemptions,
            step.resume.describe() if step.resume
            else f"whatever {base.checkpoint_dir} holds (its log reported no checkpoint)",
        )
        source = self._source(backend, name)
        try:
            resubmit(backend, name, base, JobIdentity.from_context(context).labels(), follower, step.resume,
                     source.restarts_with_job, **self.hook.job_environment(backend.name).submit_kwargs())
        except JobSubmissionError as exc:
            raise AirflowFailException(f"{self.task_id}: backend {backend.name} refused the resubmission: {exc}") from None
        return self._follow(context, backend, name, follower, source)

    def on_kill(self) -> None:
        if self._job is not None:
            backend, name = self._job
            self.log.info("Task killed: cancelling job %s on backend %s", name, backend.name)
            backend.cancel(name)


_GENERATION = re.compile(r"retrain-(\d+)")


def _below(directory: str, generation: str | None) -> str:
    return f"{directory.rstrip('/')}/{generation}" if generation else directory


class TrainingJobOperator(BaseTrainingOperator):
    """Any distributed job: ``command`` runs once per worker with ``AIRFLOW_ML_RANK``,
    ``AIRFLOW_ML_NUM_WORKERS`` and ``AIRFLOW_ML_MACHINES`` in its environment."""

    def __init__(self, *, command: list[str], framework: Framework | str = Framework.GENERIC, **kwargs: Any):
        super().__init__(command=command, **kwargs)
        self.framework = Framework(framework)


class HorovodTrainingOperator(BaseTrainingOperator):
    """Data-parallel Horovod (ring-allreduce) training: ``command`` runs once per rank.

    On the local backend the ranks are started by ``horovodrun`` with Gloo on localhost, from the
    job's image (a Python environment with TensorFlow and Horovod). With ``min_workers``/``max_workers``
    the job is elastic (``horovodrun --min-np/--max-np`` with host discovery): workers may leave and
    join while it runs. Without ``command``, the bundled trainer runs: ``runtime.horovod_elastic`` for an
    elastic job, else ``runtime.horovod_keras``.
    """

    framework = Framework.HOROVOD

    def __init__(self, *, command: list[str] | None = None, python: str = "python", min_workers: int | None = None,
                 max_workers: int | None = None, **kwargs: Any):
        super().__init__(command=command, **kwargs)
        self.python = python
        self.min_workers = min_workers
        self.max_workers = max_workers

    def build_command(self) -> list[str]:
        elastic = self.min_workers is not None or self.max_workers is not None
        trainer = "horovod_elastic" if elastic else "horovod_keras"
        return self.command if self.command is not None else [self.python, "-m", f"airflow_ml_provider.runtime.{trainer}"]


class LightGBMTrainingOperator(BaseTrainingOperator):
    """LightGBM's own socket-based data-parallel training: one process per worker, each loading only
    its shard of ``train_data``; rank 0 saves the model and reports the validation metrics.

    ``lightgbm_params`` are LightGBM parameters (not named ``params``: Airflow merges the DAG's
    Params into any operator argument of that name). ``train_data``/``valid_data`` are .npz (X, y)
    or .csv files with a ``label`` column, readable by every worker.
    """

    framework = Framework.LIGHTGBM
    template_fields: Sequence[str] = (*BaseTrainingOperator.template_fields, "train_data", "valid_data",
                                      "lightgbm_params", "num_boost_round")
    template_fields_renderers = {**BaseTrainingOperator.template_fields_renderers, "lightgbm_params": "json"}

    def __init__(
        self,
        *,
        train_data: str,
        lightgbm_params: dict[str, Any] | None = None,
        valid_data: str | None = None,
        num_boost_round: int = 100,
        python: str = "python",
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.train_data = train_data
        self.valid_data = valid_data
        self.lightgbm_params = lightgbm_params or {}
        self.num_boost_round = num_boost_round
        self.python = python

    def build_command(self) -> list[str]:
        command = self.command or [self.python, "-m", "airflow_ml_provider.runtime.lightgbm_trainer"]
        command = [*command, "--train-data", self.train_data, "--params-json", json.dumps(self.lightgbm_params),
                   "--num-boost-round", str(self.num_boost_round)]
        return command + (["--valid-data", self.valid_data] if self.valid_data else [])



class PyTorchTrainingOperator(BaseTrainingOperator):
    """PyTorch DDP under ``torchrun``: one torchrun agent per worker (c10d rendezvous), each starting
    ``nproc_per_node`` ranks (one per GPU of a node; 1 on CPU), which see ``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT`` besides the ``AIRFLOW_ML_*`` variables.

    With ``min_workers``/``max_workers`` the job is elastic (``--nnodes=MIN:MAX`` and
    ``--max-restarts``, see ``jobs.torchrun``): a lost rank re-forms the group, which resumes from the
    newest checkpoint. Without ``command``, the bundled trainer runs (``runtime.torch_ddp``).
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
