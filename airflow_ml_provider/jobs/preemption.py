"""Resubmitting a preempted job: where it left off, and how the new attempt is told to resume.

A preemption (evicted pods, a worker killed from outside) is not the job's fault, so the operator
resubmits it without spending an Airflow retry. The attempt number travels with the job (an
environment variable and a label), and the last checkpoint the old attempt reported in its log
(the runtime's ``{"event": "checkpoint", "path": ...}`` lines) becomes ``AIRFLOW_ML_RESUME_FROM``.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_ml_provider.jobs.naming import LABEL_PREFIX
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.logs.metrics import parse_event
from airflow_ml_provider.logs.source import LogSource

RESUME_ENV = "AIRFLOW_ML_RESUME_FROM"
PREEMPTIONS_ENV = "AIRFLOW_ML_PREEMPTIONS"
PREEMPTIONS_LABEL = f"{LABEL_PREFIX}/preemptions"


@dataclass(frozen=True)
class ResumePoint:
    """The newest checkpoint a job reported: its path, and the step (and epoch) it holds."""

    path: str
    step: int | None = None
    epoch: int | None = None

    def describe(self) -> str:
        where = ", ".join(f"{k} {v}" for k, v in (("step", self.step), ("epoch", self.epoch)) if v is not None)
        return f"checkpoint {self.path}" + (f" at {where}" if where else "")


def last_checkpoint(source: LogSource) -> ResumePoint | None:
    """The last ``checkpoint`` event in the job's whole log, or None if it never reported one."""
    found, cursor = None, None
    while (batch := source.read(cursor)).lines:
        for line in batch.lines:
            event = parse_event(line.text)
            if event and event["event"] == "checkpoint" and event.get("path"):
                found = ResumePoint(str(event["path"]), event.get("step"), event.get("epoch"))
        cursor = batch.cursor
    return found


def resubmission(spec: TrainingJobSpec, labels: dict[str, str], preemptions: int,
                 resume: ResumePoint | None) -> tuple[TrainingJobSpec, dict[str, str]]:
    """The spec and labels of attempt ``preemptions + 1``: counted in env and labels, pointed at ``resume``."""
    env = {**spec.env, PREEMPTIONS_ENV: str(preemptions), **({RESUME_ENV: resume.path} if resume else {})}
    return spec.model_copy(update={"env": env}), {**labels, PREEMPTIONS_LABEL: str(preemptions)}
