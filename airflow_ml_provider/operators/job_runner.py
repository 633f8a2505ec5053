"""Running a job-running operator's job: submitting it, following it (here or in the triggerer) and
concluding. Only execution needs this, so the DAG file's parse never imports it (``operators.base_job``
holds what parsing needs)."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from contextlib import contextmanager
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_ml_provider import xcom_keys
from airflow_ml_provider.artifact_layout import job_dirs, tensorboard_dir
from airflow_ml_provider.hooks.elasticsearch_logs import job_log_source
from airflow_ml_provider.hooks.training_backend import JobSetup, TrainingBackendHook
from airflow_ml_provider.jobs.backends.base import (
    Backend,
    BackendUnavailable,
    JobNotFound,
    JobSubmissionError,
    one_line,
)
from airflow_ml_provider.jobs.drivers import SyncDriver, job_options, replay
from airflow_ml_provider.jobs.follow import Action, Decision, Follower, FollowOptions
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.preemption import resubmit
from airflow_ml_provider.jobs.spec import Framework, SpecError, TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState
from airflow_ml_provider.logs.source import LogSource
from airflow_ml_provider.observability import job_metrics
from airflow_ml_provider.operators.config import (
    JobConfig,
    JobRequest,
    OnFinish,
    TrainingJobFailed,
    TrainingOutputs,
    parse,
)
from airflow_ml_provider.operators.task_log import task_log_capped
from airflow_ml_provider.reporting.live_view import LiveView, both, job_plan
from airflow_ml_provider.triggers.durable import save_before_deferring, task_key
from airflow_ml_provider.triggers.training_job import TrainingJobTrigger


class JobRunner:
    """Submits one task's job (``request()`` + the ``job`` config), streams its workers' lines into the task
    log and returns ``{"job_name", "backend", "state", "metrics", "model_path"}``.

    Following the job is the follow core's (``jobs.follow``), driven here synchronously or, with
    ``deferrable``, by ``TrainingJobTrigger`` in the triggerer; the task's ``execute_complete`` hands the
    trigger's event to :meth:`resume`. A preempted job is resubmitted under its name (up to
    ``follow.max_preemptions`` times, no Airflow retry spent); a job that already SUCCEEDED is retrained in
    fresh ``retrain-<k>`` directories (clear means retrain).
    """

    def __init__(self, task: BaseOperator, request: Callable[[], JobRequest], *, job: JobConfig | dict[str, Any],
                 follow: FollowOptions, on_finish: OnFinish, ml_conn_id: str, elasticsearch_conn_id: str | None,
                 deferrable: bool, outputs: TrainingOutputs | dict[str, Any] | None = None):
        self.task, self.request = task, request
        self.config: JobConfig = parse(JobConfig, job, "job")
        self.outputs: TrainingOutputs = parse(TrainingOutputs, outputs, "outputs")
        self.follow, self.on_finish, self.deferrable = follow, OnFinish(on_finish), deferrable
        self.ml_conn_id, self.elasticsearch_conn_id = ml_conn_id, elasticsearch_conn_id
        self.job: tuple[Backend, str] | None = None  # the job this try submitted: on_kill cancels it
        self.framework = Framework.GENERIC  # the request's, once a spec was built
        self.spec: TrainingJobSpec | None = None  # this try's, built once (see prepare)
        self._identity: JobIdentity | None = None  # this try's, read from the context once (see identity)
        self.stopped = False  # the task was stopped from outside (on_kill): a person marked it, or its run stopped

    @property
    def log(self):
        return self.task.log

    @cached_property
    def hook(self) -> TrainingBackendHook:
        return TrainingBackendHook(self.ml_conn_id)

    @cached_property
    def setup(self) -> JobSetup:
        """How this task's job runs here: one read of the training connection per try."""
        return self.hook.job_setup(self.config.backend)

    @property
    def backend(self) -> Backend:
        return self.setup.backend

    @property
    def logs_conn_id(self) -> str | None:
        """The Elasticsearch connection the job's log is read from, if one is configured."""
        return self.elasticsearch_conn_id or self.setup.logs_conn_id

    def job_dir(self, name: str) -> str | None:
        """The job's directory under the artifact root (the first start's, whatever the generation)."""
        return self.setup.artifact_dir(name)

    def artifact_dirs(self, setup: JobSetup, name: str, generation: str | None = None) -> dict[str, str | None]:
        """``model_dir``/``checkpoint_dir``: the task's own, else the job's under the artifact root; those of a
        fresh start (``retrain-<k>``) when a try retrains after a succeeded job."""
        artifacts = setup.artifact_dir(name)
        if generation and artifacts:
            artifacts = f"{artifacts}/{generation}"
        defaults, own = job_dirs(artifacts), self.outputs
        return {"model_dir": own.model_dir and _below(own.model_dir, generation) or defaults.get("model_dir"),
                "checkpoint_dir": own.checkpoint_dir and _below(own.checkpoint_dir, generation)
                or defaults.get("checkpoint_dir")}

    def build_spec(self, name: str, setup: JobSetup | None = None) -> TrainingJobSpec:
        """The job's spec where ``setup`` says (default: the task's; a search passes its own for its trials)."""
        setup = setup or self.setup
        request, config = self.request(), self.config
        self.framework = request.framework
        storage = setup.environment  # checked at submission (JobSetup.checked), not for a rendered manifest
        timeout = self.task.execution_timeout.total_seconds() if self.task.execution_timeout else None
        dirs = self.artifact_dirs(setup, name)
        try:
            return TrainingJobSpec(
                framework=request.framework, command=request.command,
                **({"roles": request.roles} if request.roles else {"num_workers": request.num_workers}),
                min_workers=request.min_workers, max_workers=request.max_workers, inputs=request.inputs,
                output_dirs=request.output_dirs,
                nproc_per_node=request.nproc_per_node,
                image=config.image or setup.image(request.image_of or request.framework.value),
                resources=config.resources, scheduling=config.scheduling,
                kubernetes=storage.merged_kubernetes(config.kubernetes), env=storage.merged_env(config.env),
                working_dir=config.working_dir, timeout_s=max(1, int(timeout)) if timeout else None,
                shards=_with_output(request.shards, dirs["model_dir"]), **dirs,
            )
        except SpecError as exc:
            raise AirflowFailException(f"{self.task.task_id}: {exc}") from None

    def identity(self, context) -> JobIdentity:
        """This try's job identity (its name and labels), read from the context once."""
        if self._identity is None:
            self._identity = JobIdentity.from_context(context)
        return self._identity

    def prepare(self, context) -> TrainingJobSpec:
        """This try's spec, built once: at render time (the manifest shows it), else at execution."""
        if self.spec is None:
            self.spec = self.build_spec(self.identity(context).name)
        return self.spec

    def manifest(self, context) -> str:
        """What the backend will create (or the local launch plan), for the UI's rendered view."""
        identity = self.identity(context)
        return self.backend.render(identity.name, self.prepare(context), identity.labels())

    def run(self, context) -> dict[str, Any]:
        """Submit (or attach to) the task's job and follow it to its summary."""
        identity, backend = self.identity(context), self.backend
        environment = self.setup.checked()  # the artifact store, checked before anything reads it
        try:
            spec = self.spec = self._in_generation(self.prepare(context), identity.name,
                                                   self._choose_generation(identity))
            self.job = (backend, identity.name)  # set first: a kill during submission still cancels the job
            started = backend.submit(identity.name, spec, identity.labels(), **environment.submit_kwargs())
        except JobSubmissionError as exc:
            raise AirflowFailException(f"{self.task.task_id}: backend {backend.name} refused the job: {exc}") from None
        except BackendUnavailable as exc:  # one line naming the connection and the server; a retry may reach it
            raise TrainingJobFailed(f"{self.task.task_id}: {backend.where or 'backend ' + backend.name}: "
                                    f"{one_line(exc)}") from None
        self.log.info("%s job %s on backend %s with %d worker(s): %s",
                      "Submitted" if started else "Attached to the already running",
                      identity.name, backend.name, spec.num_workers, json.dumps(spec.command))
        source = self.source(backend, identity.name)
        follower = Follower(job_options(task_log_capped(self.follow), backend, identity.name, spec, source))
        with self._ending_stopped(identity.name):
            return self._drive(context, backend, identity.name, follower,
                               self._wait(context, backend, identity.name, follower, source))

    def resume(self, context, event: dict[str, Any]) -> dict[str, Any]:
        """The trigger's final event (the task resumed from deferral): conclude, or resubmit and follow again."""
        backend, name = self.backend, event["job_name"]
        self.job = (backend, name)
        self.spec = self._in_generation(self.prepare(context), name, self._generation(name, bump=False))
        follower = Follower(FollowOptions.from_dict(event["options"]), event["state"])
        with self._ending_stopped(name):
            return self._drive(context, backend, name, follower, Decision.from_dict(event))

    def cancel(self) -> None:
        """The task was stopped from outside (Airflow's SIGTERM: a person marked it success or failed, its run
        was stopped, it timed out): cancel the job this try submitted, if any."""
        if self.job is not None:
            backend, name = self.job
            self.stopped = True
            self.log.info("This task was stopped from outside while job %s ran (marked success or failed by hand, "
                          "or its run stopped): cancelling the job on backend %s", name, backend.name)
            backend.cancel(name)

    @contextmanager
    def _ending_stopped(self, name: str):
        """A task stopped from outside ends saying so, not with "Task failed with exception ... CANCELLED": the
        job it cancelled ends CANCELLED, and once cleaned up (``_conclude``'s ``on_finish``) this process exits,
        as Airflow asked it to (SIGTERM; a SIGKILL follows 5 s later); Airflow keeps the state it was set to."""
        try:
            yield
        except (AirflowFailException, TrainingJobFailed):
            if not self.stopped:
                raise
            self.log.info("Job %s was cancelled because this task was stopped from outside; the task keeps the "
                          "state it was given (no model from this try)", name)
            for handler in logging.getLogger().handlers:
                handler.flush()
            os._exit(0)

    def source(self, backend: Backend, name: str) -> LogSource:
        """A job's log, built once per attempt (at submission, at each resubmission): the follow options, the
        resubmission and the sync driver all read that one."""
        return job_log_source(backend, name, self.logs_conn_id)

    def history(self, backend_name: str, name: str) -> list[dict[str, float]]:
        """The metric history of a job on ``backend_name`` (this connection's or another it names), replayed
        from its log."""
        backend = self.backend if backend_name == self.backend.name else self.hook.get_backend(backend_name)
        return replay(self.source(backend, name)).tracker.history()

    def _choose_generation(self, identity: JobIdentity) -> str | None:
        """Whether this try trains from scratch (its job already succeeded: the next ``retrain-<k>``)
        or continues the latest start's directories (a first try, or resuming a failed attempt)."""
        try:
            succeeded = self.backend.status(identity.name).state is JobState.SUCCEEDED
        except JobNotFound:
            succeeded = False
        generation = self._generation(identity.name, bump=succeeded)
        if succeeded:
            self.log.info("Job %s already succeeded (the task was cleared or its DAG run re-run): this try retrains "
                          "from scratch as a new job, with empty model and checkpoint directories (%s/)",
                          identity.name, generation)
        return generation

    def _generation(self, name: str, bump: bool) -> str | None:
        """``retrain-<k>`` of the newest fresh start (k + 1 with ``bump``), None for the first start's."""
        root, store = self.outputs.checkpoint_dir or self.setup.artifact_dir(name), self.setup.store
        latest = 0
        if root and store is not None:
            try:
                names = [entry.name for entry in store.locate(root).iterdir()]
            except (FileNotFoundError, NotADirectoryError):
                names = []
            latest = max((int(match.group(1)) for n in names if (match := _GENERATION.fullmatch(n))), default=0)
        latest += bump
        return f"retrain-{latest}" if latest else None

    def _in_generation(self, spec: TrainingJobSpec, name: str, generation: str | None) -> TrainingJobSpec:
        """``spec`` with the directories of ``generation`` (the same spec for the first start's)."""
        if generation is None:
            return spec
        dirs = self.artifact_dirs(self.setup, name, generation)
        shards = spec.shards and spec.shards.model_dump()
        if shards and spec.model_dir and shards["output"].startswith(spec.model_dir.rstrip("/") + "/"):
            shards["output"] = dirs["model_dir"] + shards["output"][len(spec.model_dir.rstrip("/")):]  # a fresh start's
        return TrainingJobSpec.model_validate({**spec.model_dump(), **dirs, "shards": shards})

    def _drive(self, context, backend: Backend, name: str, follower: Follower, step: Decision) -> dict[str, Any]:
        """Act on the follower's decisions until one ends the task: a preemption resubmits the job and waits
        again (in a loop: each resubmission is one more turn, never a deeper call)."""
        while step.action is Action.RESUBMIT:
            source = self._resubmit(context, backend, name, follower, step)
            step = self._wait(context, backend, name, follower, source)
        return self._conclude(backend, name, follower, step)

    def _wait(self, context, backend: Backend, name: str, follower: Follower, source: LogSource) -> Decision:
        """Wait for the follower's decision on the job: here, or in the triggerer when deferrable (the task
        defers: ``resume`` picks up the trigger's event)."""
        metrics = job_metrics(context, name, self.framework.value)
        if self.spec is not None and (board := tensorboard_dir(self.spec.checkpoint_dir)):
            context["ti"].xcom_push(xcom_keys.TENSORBOARD_DIR, board)  # where the view reads the job's scalars, deferred too
        if self.deferrable:
            save_before_deferring(context, follower.state)
            self.task.defer(
                trigger=TrainingJobTrigger(name, backend.name, self.ml_conn_id, options=follower.options.to_dict(),
                                           state=follower.state, elasticsearch_conn_id=self.logs_conn_id,
                                           state_key=task_key(context), metric_tags=metrics.tags),
                method_name="execute_complete",
            )
        view = LiveView(context["ti"], name, backend.name, follower, job_plan(self.spec) if self.spec else None,
                        tensorboard_dir=tensorboard_dir(self.spec.checkpoint_dir) if self.spec else None)
        return SyncDriver(follower, self.log, backend, name, source, on_step=both(metrics, view)).run()

    def _conclude(self, backend: Backend, name: str, follower: Follower, step: Decision) -> dict[str, Any]:
        """The job's summary when it finished, else the task's failure (a retry when the follower allows one)."""
        state = step.status.state if step.status else JobState.FAILED
        try:
            if step.action is Action.FINISH:
                metrics = follower.metrics
                if self.spec is not None and self.spec.shards is not None and (told := backend.job_result(name)):
                    metrics = {**metrics, **told}  # a sharded Indexed Job's result (no launcher's line in its log)
                self.log.info("Job %s succeeded; final metrics: %s", name, json.dumps(metrics))
                return {"job_name": name, "backend": backend.name, "state": state.value,
                        "metrics": metrics, "image": self._image(backend),
                        "model_path": follower.model_path or (self.spec.model_dir if self.spec else None),
                        "tensorboard_dir": tensorboard_dir(self.spec.checkpoint_dir) if self.spec else None}
            message = follower.failure(f"{self.task.task_id}: job {name}: {step.message}")
            if not step.retryable:
                raise AirflowFailException(message)
            raise TrainingJobFailed(message)
        finally:
            if self.on_finish is OnFinish.DELETE or (
                self.on_finish is OnFinish.DELETE_SUCCEEDED and step.action is Action.FINISH
            ):
                backend.delete(name)
            self.job = None

    def _image(self, backend: Backend) -> str | None:
        """The image the job ran (lineage): its spec's, else the local backend's environment."""
        return (self.spec.image if self.spec else None) or getattr(backend, "image", None)

    def _resubmit(self, context, backend: Backend, name: str, follower: Follower, step: Decision) -> LogSource:
        """Start the preempted job again under its name, told where to resume (no Airflow retry is spent);
        returns the new attempt's log."""
        base = self.spec
        self.log.warning(
            "Job %s was preempted (%s). Resubmitting it (preemption %d of at most %d; not an Airflow retry), "
            "resuming from %s", name, step.message, follower.preemptions, follower.options.max_preemptions,
            step.resume.describe() if step.resume
            else f"whatever {base.checkpoint_dir} holds (its log reported no checkpoint)",
        )
        source = self.source(backend, name)
        self.job = (backend, name)
        try:
            resubmit(backend, name, base, self.identity(context).labels(), follower, step.resume,
                     source.restarts_with_job, **self.setup.checked().submit_kwargs())
        except JobSubmissionError as exc:
            raise AirflowFailException(
                f"{self.task.task_id}: backend {backend.name} refused the resubmission: {exc}") from None
        return source


_GENERATION = re.compile(r"retrain-(\d+)")


def _with_output(shards: dict[str, Any] | None, model_dir: str | None) -> dict[str, Any] | None:
    """A sharded job's plan, committing its shards under ``<model_dir>/shards`` unless it says where."""
    if shards is None or shards.get("output") or not model_dir:
        return shards
    return {**shards, "output": f"{model_dir.rstrip('/')}/shards"}


def _below(directory: str, generation: str | None) -> str:
    return f"{directory.rstrip('/')}/{generation}" if generation else directory
