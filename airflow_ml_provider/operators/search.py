"""HyperparameterSearchOperator: an Optuna search whose trials are training jobs on any backend."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from airflow.sdk.log import mask_secret

from airflow_ml_provider.hooks.model_registry import ModelRegistryHook, run_page
from airflow_ml_provider.hooks.training_backend import JobSetup, TrainingBackendHook
from airflow_ml_provider.jobs.follow_options import FollowOptions
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.operators.task_log import task_log_capped
from airflow_ml_provider.operators.training import BaseTrainingOperator
from airflow_ml_provider.search.space import (
    MAX_PARALLEL,
    MAX_TRIALS,
    SearchSettings,
    SearchSpace,
    SearchSpaceError,
    check_budget,
    parse_settings,
    parse_space,
)
from airflow_ml_provider.search.template import check_template, placeholder, portable_template, spec_template


class HyperparameterSearchOperator(BaseOperator):
    """Searches ``search_space`` with an Optuna sampler; every trial is a training job on ``backend``.

    ``trial`` is the template of a trial's job, with ``{{ params.<name> }}`` where a parameter goes: a
    training operator created *outside* any ``with DAG`` block (so it is not a task of its own), or a
    TrainingJobSpec dict. Its Airflow templates are rendered with the search task's context, the search
    parameters' placeholders left in place and then replaced by each trial's values as plain data.
    A TrainingJobSpec instance is taken as data (no Jinja at all), as recipes pass it.

    The study is persisted (``storage_url``, the ``[ml_training] search_storage_url`` setting, by default a
    journal file under ``$AIRFLOW_HOME/ml/search``; never Airflow's metadata database) under a name derived
    from dag/task/run, so a retried or restarted task keeps its finished trials and re-attaches to the
    jobs of running ones. Trials whose objective is worse than the median of completed trials at the
    same step are pruned and their jobs deleted. Each trial's job keeps its model and checkpoints under
    ``<artifact_root>/artifacts/<trial job>/`` like a training task's (the connection's ``artifact_root``;
    an ``s3://`` root's credentials reach local workers as explicit secrets, never in a record), unless
    the trial names its own directories. Every trial is recorded in MLflow (a parent run per search, a child run per trial,
    the trials plot). A pruned trial's ``value`` in the trials table is its last reported step's.

    With ``deferrable`` (default: ``[operators] default_deferrable``) the task validates, creates the
    study and defers: ``SearchTrigger`` runs ask/tell and follows every trial's job in the triggerer, so
    no worker slot is held while trials run, and a triggerer restart keeps the finished trials and
    re-attaches to the running ones. When the search ends the task resumes on a worker, records every
    trial in MLflow and returns the same summary.

    Args:
        trial: the trial job's template (see above).
        search_space: parameter -> ``{"type": "float"|"int"|"categorical", ...}`` or a list of choices.
        search: how the search runs (:class:`~airflow_ml_provider.search.space.SearchSettings` or its
            dict: sampler, n_trials, max_parallel, objective_metric, direction, seed, pruner,
            pruning_startup_trials, pruning_warmup_steps, metric_patterns, poll_interval); its values are
            templated.
        backend: backend name (default: the trial operator's, else the connection's).
        storage_url: the Optuna storage: ``journal:///path`` or an SQLAlchemy URL (its password is masked
            in logs).
        mlflow_experiment: experiment for the runs (default: the DAG id).
        track_mlflow: record the search in MLflow, through the model registry connection ``registry_conn_id``
            (without one: the embedded SQLite store under ``$AIRFLOW_HOME/ml``).
        registry_conn_id: the model registry (MLflow) connection.
        ml_conn_id: the training connection every trial runs through.
        deferrable: run the search in the triggerer (see above).

    Returns (XCom): ``{"best_params", "best_value", "best_trial", "best_job_name", "best_model_path",
    "n_complete", "n_pruned", "n_failed", "trials": [{"number", "state", "value", "params", "job_name"}],
    "objective_metric", "direction", "study_name", "mlflow_run_id"}``; with ``track_mlflow``, also ``"mlflow_url"``
    (the parent run's page) and each trial's ``"mlflow_run_id"`` and ``"mlflow_url"`` (its child run's).
    """

    template_fields: Sequence[str] = ("search_space", "search", "backend", "storage_url", "mlflow_experiment")
    template_fields_renderers = {"search_space": "json", "search": "json"}
    ui_color = "#fdebd0"

    def __init__(
        self,
        *,
        trial: BaseTrainingOperator | TrainingJobSpec | dict[str, Any],
        search_space: dict[str, Any],
        search: SearchSettings | dict[str, Any] | None = None,
        backend: str | None = None,
        storage_url: str | None = None,
        mlflow_experiment: str | None = None,
        track_mlflow: bool = True,
        registry_conn_id: str = ModelRegistryHook.default_conn_name,
        ml_conn_id: str = TrainingBackendHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.trial = _check_trial(trial, self.task_id, ml_conn_id)
        self.search_space = search_space
        if not isinstance(search, SearchSettings | dict | None):
            raise ValueError(f"{self.task_id}: search: expected SearchSettings or a dict, got {type(search).__name__}")
        # kept as a dict, so its values are templated like the space's; validated once they are plain values
        self.search = search.model_dump(exclude_defaults=True) if isinstance(search, SearchSettings) else dict(search or {})
        self.backend = backend
        self.storage_url = storage_url
        self.mlflow_experiment = mlflow_experiment
        self.track_mlflow = track_mlflow
        self.registry_conn_id = registry_conn_id
        self.ml_conn_id = ml_conn_id
        self.deferrable = deferrable
        self._scheduler = None
        try:  # static values fail when the DAG is parsed, naming the field
            space = None if _templated(search_space) else parse_space(search_space)
            if not _templated(self.search):
                settings = self._settings()
                if space is not None:
                    self.check_trial_budget(settings, space)
        except SearchSpaceError as exc:
            raise SearchSpaceError(f"{self.task_id}: {exc}") from None

    @cached_property
    def hook(self) -> TrainingBackendHook:
        return TrainingBackendHook(self.ml_conn_id)

    def execute(self, context) -> dict[str, Any]:
        # Optuna and MLflow load here, when the search runs, never when its DAG file is parsed.
        from airflow_ml_provider.hooks.elasticsearch_logs import job_log_source
        from airflow_ml_provider.reporting.live_view import trial_views
        from airflow_ml_provider.search.runner import TrialScheduler, trial_identity
        from airflow_ml_provider.search.study import study_name

        identity = JobIdentity.from_context(context)
        search = self.search_setup()
        space, settings = search.space, search.settings
        _user_error(self.task_id, lambda: self.check_trial_budget(settings, space))  # before any trial is created
        trial = self._render_trial(context, space)
        trial_backend = trial.job.get("backend") if isinstance(trial, BaseTrainingOperator) else None
        setup = self.hook.job_setup(self.backend or trial_backend)  # one connection read for every trial
        backend, environment = setup.backend, setup.checked()  # what workers need to reach artifact_root
        template = trial_spec_builder(trial, setup)
        logs_conn_id = trial_logs_conn_id(trial, setup)
        first = trial_identity(identity, 0).name
        _user_error(self.task_id, lambda: check_template(template(first), space))

        name = study_name(identity)
        study = _user_error(self.task_id, lambda: search.study(name))
        self.log.info("Study %r: %s sampler, %d trial(s) done, budget %s, up to %d at once on backend %s%s",
                      name, settings.sampler, len(study.trials), settings.n_trials or "the whole grid",
                      settings.max_parallel, backend.name, " (in the triggerer)" if self.deferrable else "")
        if self.deferrable:
            from airflow_ml_provider.triggers.search import SearchTrigger

            self.defer(
                trigger=SearchTrigger(
                    name, search.storage_url, settings.model_dump(mode="json"), self.search_space,
                    portable_template(template, setup.artifact_dir, first), dataclasses.asdict(identity),
                    backend.name, self.ml_conn_id, _follow_options(trial).to_dict(), logs_conn_id,
                ),
                method_name="execute_complete",
            )
        with self._tracking(identity) as mlflow:
            run_id = mlflow.start(study, settings, space) if mlflow else None
            self._scheduler = TrialScheduler(
                backend, study, space, settings, template, identity, log=self.log,
                on_trial_finished=(lambda trial: mlflow.log_trial(trial, settings.objective_metric)) if mlflow else None,
                follow=_follow_options(trial), submit_kwargs=environment.submit_kwargs(),
                log_source=lambda job: job_log_source(backend, job, logs_conn_id),
                trial_view=trial_views(context["ti"], backend.name),
            )
            self._scheduler.run()
            return self._conclude(study, settings, mlflow, run_id)

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        """The trigger ran the search to its end: record every trial in MLflow and summarize."""
        if event.get("status") != "done":
            raise AirflowException(f"{self.task_id}: the search stopped in the triggerer: {event.get('message')}")
        search = self.search_setup()
        study = search.study(event["study_name"])
        with self._tracking(JobIdentity.from_context(context)) as mlflow:
            run_id = mlflow.start(study, search.settings, search.space) if mlflow else None
            return self._conclude(study, search.settings, mlflow, run_id)

    def search_setup(self):
        """The rendered space and settings, validated (a mistake fails the task naming the field), and the storage."""
        from airflow_ml_provider.search.study import SearchSetup

        return _user_error(self.task_id, lambda: SearchSetup.parse(self.search_space, self.search, self._storage_url()))

    @contextlib.contextmanager
    def _tracking(self, identity: JobIdentity) -> Iterator[Any]:
        """The search's MLflow log (None without ``track_mlflow``), with the registry's credentials."""
        if not self.track_mlflow:
            yield None
            return
        from airflow_ml_provider.search.tracking import MlflowSearchLog

        registry = ModelRegistryHook(self.registry_conn_id)
        with registry.mlflow():
            settings = registry.settings()
            experiment_id = registry.experiment_id(self.mlflow_experiment or identity.dag_id)
            yield MlflowSearchLog(settings.tracking_uri, experiment_id,
                                  run_url=functools.partial(run_page, settings.ui_url, experiment_id))

    def _conclude(self, study, settings, mlflow, run_id: str | None) -> dict[str, Any]:
        """Summarize the study (every trial logged to MLflow, the parent run closed); no completed trial
        fails the task for good."""
        from airflow_ml_provider.search.runner import SearchFailed, summarize

        try:
            summary = summarize(study)
        except SearchFailed as exc:
            if mlflow:
                mlflow.finish(study, None, settings.objective_metric)
            raise AirflowFailException(f"{self.task_id}: {exc}") from None
        if mlflow:
            mlflow.finish(study, summary, settings.objective_metric)
            summary = mlflow.links(summary)
        self.log.info("Best trial %d: %s = %s with %s", summary["best_trial"], settings.objective_metric,
                      summary["best_value"], summary["best_params"])
        return {**summary, "objective_metric": settings.objective_metric, "direction": settings.direction,
                "study_name": study.study_name, "mlflow_run_id": run_id}

    def on_kill(self) -> None:
        if self._scheduler is not None:
            self.log.info("Task killed: cancelling the running trials' jobs")
            self._scheduler.cancel_running()

    def _settings(self) -> SearchSettings:
        return parse_settings(**self.search)

    @staticmethod
    def check_trial_budget(settings, space: SearchSpace) -> None:
        """Trials at once and in all, bounded by ``[ml_training] search_max_parallel``/``search_max_trials``."""
        check_budget(settings, space, conf.getint("ml_training", "search_max_parallel", fallback=MAX_PARALLEL),
                     conf.getint("ml_training", "search_max_trials", fallback=MAX_TRIALS), "[ml_training] search_")

    def _render_trial(self, context, space: SearchSpace) -> BaseTrainingOperator | TrainingJobSpec | dict[str, Any]:
        """Render the trial's Airflow templates once, leaving each search parameter's placeholder in place."""
        if isinstance(self.trial, TrainingJobSpec):
            return self.trial
        params = {**context["params"], **{name: placeholder(name) for name in space.params}}
        placeholders = {**context, "params": params}
        jinja_env = self.get_template_env()
        if isinstance(self.trial, BaseTrainingOperator):
            operator = copy.copy(self.trial)
            operator.render_template_fields(placeholders, jinja_env)
            return operator
        return self.render_template(self.trial, placeholders, jinja_env)

    def _storage_url(self) -> str | None:
        """The configured Optuna storage (None: the default journal file), its password masked in logs."""
        url = self.storage_url or conf.get("ml_training", "search_storage_url", fallback=None) or None
        if url and "://" in url:
            from sqlalchemy.engine import make_url

            with contextlib.suppress(Exception):
                if password := make_url(url).password:
                    mask_secret(password)
        return url



def trial_logs_conn_id(trial: BaseTrainingOperator | TrainingJobSpec | dict[str, Any], setup: JobSetup) -> str | None:
    """The Elasticsearch connection a trial's log is read from, as its task's would be: a training operator's
    own ``elasticsearch_conn_id``, else the training connection's (none: from the backend)."""
    own = trial.elasticsearch_conn_id if isinstance(trial, BaseTrainingOperator) else None
    return own or setup.logs_conn_id


def trial_spec_builder(trial: BaseTrainingOperator | TrainingJobSpec | dict[str, Any],
                  setup: JobSetup) -> Callable[[str], TrainingJobSpec]:
    """Job name -> the trial's spec (placeholders still in it): the job's own directories under the
    artifact root, and the settings its workers need to reach it (a training operator adds both itself)."""
    if isinstance(trial, BaseTrainingOperator):
        return lambda name: trial.runner.build_spec(name, setup)
    if isinstance(trial, TrainingJobSpec):
        trial = trial.model_dump(exclude_none=True)
    environment = setup.environment
    trial = {**trial, "env": environment.merged_env(trial.get("env")),
             "kubernetes": environment.merged_kubernetes(trial.get("kubernetes"))}
    return spec_template(trial, setup.artifact_dir)


def _follow_options(trial: BaseTrainingOperator | TrainingJobSpec | dict[str, Any]) -> FollowOptions:
    """A trial operator's own log rules and preemption budget apply to every trial's job, and the
    deployment's task log cap to each trial's lines."""
    return task_log_capped(trial.follow if isinstance(trial, BaseTrainingOperator) else FollowOptions())


def _check_trial(trial: Any, task_id: str, ml_conn_id: str) -> BaseTrainingOperator | TrainingJobSpec | dict[str, Any]:
    if isinstance(trial, dict | TrainingJobSpec):
        return trial
    if not isinstance(trial, BaseTrainingOperator):
        raise ValueError(f"{task_id}: trial must be a training operator, a TrainingJobSpec or its dict, "
                         f"got {type(trial).__name__}")
    if trial.get_dag() is not None:
        raise ValueError(
            f"{task_id}: trial operator {trial.task_id!r} is a task of DAG {trial.get_dag().dag_id!r}, so it "
            "would also run on its own; create it before the `with DAG(...)` block"
        )
    if trial.ml_conn_id != ml_conn_id:
        raise ValueError(
            f"{task_id}: trial operator {trial.task_id!r} has ml_conn_id {trial.ml_conn_id!r}, but trials run "
            f"through the search's connection ({ml_conn_id!r}: backend, artifact root, credentials); set "
            "ml_conn_id on the search instead"
        )
    return trial


def _templated(value: Any) -> bool:
    """Whether a (nested) value still holds Jinja, so validating it must wait until it is rendered."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, dict):
        return any(_templated(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(_templated(item) for item in value)
    return False


def _user_error(task_id: str, action: Callable[[], Any]) -> Any:
    """Run ``action``; invalid configuration (which retrying cannot fix) fails the task, naming the field.
    SearchSpaceError and SpecError are ValueErrors, as is a storage that cannot be derived."""
    try:
        return action()
    except ValueError as exc:
        raise AirflowFailException(f"{task_id}: {exc}") from None
