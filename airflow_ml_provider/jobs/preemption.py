"""Resubmitting a preempted job: how the new attempt is told where to resume.

A preemption (evicted pods, a worker killed from outside) is not the job's fault, so it is resubmitted
without spending an Airflow retry; whether to do so is the follow core's decision (``jobs.follow``).
The attempt number travels with the job (an environment variable and a label), and the last
checkpoint the old attempt reported in its log (the runtime's ``{"event": "checkpoint", "path": ...}``
lines) becomes ``AIRFLOW_ML_RESUME_FROM``.
"""

from __future__ import annotations

from airflow_ml_provider.jobs.backends.base import Backend
from airflow_ml_provider.jobs.follow import Follower, ResumePoint
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.labels import PREEMPTIONS as PREEMPTIONS_LABEL

RESUME_ENV = "AIRFLOW_ML_RESUME_FROM"
PREEMPTIONS_ENV = "AIRFLOW_ML_PREEMPTIONS"


def resubmission(spec: TrainingJobSpec, labels: dict[str, str], preemptions: int,
                 resume: ResumePoint | None) -> tuple[TrainingJobSpec, dict[str, str]]:
    """The spec and labels of attempt ``preemptions + 1``: counted in env and labels, pointed at ``resume``."""
    env = {**spec.env, PREEMPTIONS_ENV: str(preemptions), **({RESUME_ENV: resume.path} if resume else {})}
    return spec.model_copy(update={"env": env}), {**labels, PREEMPTIONS_LABEL: str(preemptions)}


def resubmit(backend: Backend, name: str, spec: TrainingJobSpec, labels: dict[str, str], follower: Follower,
             resume: ResumePoint | None, restarts_log: bool, **submit_kwargs) -> None:
    """Start a preempted job again under its name (a training task's, a search trial's): the next attempt's
    spec and labels submitted, then the follower told that its end is still to come, and whether its log
    starts over (``LogSource.restarts_with_job``).

    Raises:
        JobSubmissionError: the backend refused the new attempt.
    """
    spec, labels = resubmission(spec, labels, follower.preemptions, resume)
    backend.submit(name, spec, labels, **submit_kwargs)
    follower.resubmitted(new_log=restarts_log)
