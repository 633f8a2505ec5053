"""The operator every job-running task is (training, evaluation, preprocessing): its arguments, checked when
the DAG file is parsed, and what its job runs. Submitting and following the job is ``operators.job_runner``'s,
imported when the task executes, so parsing a DAG file does not pay for the follow drivers, triggers and
log sources."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, XComArg, conf
from airflow.sdk.exceptions import AirflowFailException

from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.jobs.follow_options import FollowOptions
from airflow_ml_provider.operators.config import JobConfig, JobRequest, OnFinish, as_dict
from airflow_ml_provider.operators.links import job_links

if TYPE_CHECKING:
    from airflow_ml_provider.jobs.backends.base import Backend
    from airflow_ml_provider.jobs.spec import TrainingJobSpec
    from airflow_ml_provider.operators.job_runner import JobRunner


class BaseJobOperator(BaseOperator):
    """An operator whose work is one job on a training backend: it contains a :class:`JobRunner` and
    says what its job runs (:meth:`job_request`); what the job's summary becomes is :meth:`finish`'s.

    Args:
        job: where and how the job runs (:class:`~airflow_ml_provider.operators.config.JobConfig` or its
            dict: backend, image, env, resources, scheduling, kubernetes, working_dir); its strings are
            templated, and a key's value may be an upstream task's output (an XComArg, e.g. the placement
            a DAG's first task checked from its Params), checked once it is rendered.
        follow: how the job is followed (:class:`~airflow_ml_provider.jobs.follow_options.FollowOptions` or its
            dict): ``rules`` (``fail_on``/``retry_on``/``succeed_on``/``metrics`` regexes),
            ``max_preemptions`` (resubmissions after a preemption, no retry spent; default 3),
            ``poll_interval`` (seconds), ``max_queue_s`` (where Kueue admits jobs: how long each wait for
            admission may last before the task fails and the job is deleted; Kueue requeues a job it
            evicts by itself, and the task waits for that same job).
        on_finish: what happens to the job's record when the task ends (:class:`OnFinish`).
        ml_conn_id: the training connection (backend, artifact root, credentials).
        elasticsearch_conn_id: read the job's log from Elasticsearch through this connection (default:
            the training connection's extra of that name; none: from the backend).
        deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    """

    template_fields: Sequence[str] = ("job", "manifest")
    template_fields_renderers = {"job": "json", "manifest": "yaml"}
    operator_extra_links = job_links()  # Kibana/Grafana, only those whose URL templates are configured

    def __init__(self, *, job: JobConfig | dict[str, Any] | None = None,
                 follow: FollowOptions | dict[str, Any] | None = None, on_finish: OnFinish | str = OnFinish.KEEP,
                 ml_conn_id: str = TrainingBackendHook.default_conn_name, elasticsearch_conn_id: str | None = None,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 **kwargs: Any):
        super().__init__(**kwargs)
        try:  # refused when the DAG file is parsed, naming the field
            later = {key: value for key, value in job.items() if isinstance(value, XComArg)} \
                if isinstance(job, dict) else {}
            now = {key: value for key, value in job.items() if key not in later} if later else job
            self.job = {**as_dict(JobConfig, now, "job"), **later}
            self.follow = FollowOptions.of(follow)
        except ValueError as exc:
            raise ValueError(f"{self.task_id}: {exc}") from None
        self.on_finish = OnFinish(on_finish)
        self.ml_conn_id = ml_conn_id
        self.elasticsearch_conn_id = elasticsearch_conn_id
        self.deferrable = deferrable
        self.manifest = ""  # filled at render time: what the backend will create, for the rendered view
        self._runner: JobRunner | None = None  # this try's (see runner)

    def job_request(self) -> JobRequest:
        """What this task's job runs."""
        raise NotImplementedError

    def job_outputs(self) -> dict[str, Any] | None:
        """Where the job writes instead of its own directories (training operators' ``outputs``)."""
        return None

    def finish(self, context, result: dict[str, Any]) -> dict[str, Any]:
        """The task's return value, from the job's summary."""
        return result

    def make_runner(self) -> JobRunner:
        """A runner of the job as the fields stand now (rendered, once they are); only execution and checks
        make one. Raises ValueError naming the field of the job or outputs that is invalid."""
        from airflow_ml_provider.operators.job_runner import JobRunner

        return JobRunner(self, self.job_request, job=self.job, outputs=self.job_outputs(), follow=self.follow,
                         on_finish=self.on_finish, ml_conn_id=self.ml_conn_id,
                         elasticsearch_conn_id=self.elasticsearch_conn_id, deferrable=self.deferrable)

    @property
    def runner(self) -> JobRunner:
        """This try's runner: the one made when the fields were rendered, else one made now."""
        if self._runner is None:
            self._runner = self.make_runner()
        return self._runner

    def render_template_fields(self, context, jinja_env=None) -> None:
        """Also render the job's manifest (or local launch plan), so the UI's rendered view shows exactly
        what is submitted. Secrets appear only as Secret references."""
        super().render_template_fields(context, jinja_env)
        try:
            self._runner = self.make_runner()  # of the rendered fields
        except ValueError as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}") from None
        self.manifest = self.runner.manifest(context)

    def execute(self, context) -> dict[str, Any]:
        return self.finish(context, self.runner.run(context))

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        return self.finish(context, self.runner.resume(context, event))

    def on_kill(self) -> None:
        self.runner.cancel()


def spec_on(operator: BaseJobOperator, backend: Backend, name: str) -> TrainingJobSpec:
    """The spec ``operator``'s job ``name`` gets on ``backend``, as a search builds its trials' and
    ``airflow-ml check`` each job's: through the operator's runner and the connection's setup for the backend."""
    runner = operator.make_runner()
    return runner.build_spec(name, runner.hook.job_setup(backend))
