"""TrainingJobTrigger's kwargs survive the triggerer's storage (Airflow's own Trigger row), metric tags
included, so a deferred training task's metrics carry the same tags as a sync one's."""

from __future__ import annotations

import importlib

from airflow_ml_provider.observability import JobMetrics
from airflow_ml_provider.triggers.training_job import TrainingJobTrigger


def stored_and_rebuilt(trigger: TrainingJobTrigger) -> TrainingJobTrigger:
    """What the triggerer does: store the trigger as a Trigger row, then import its class and call it."""
    from airflow.models.trigger import Trigger

    row = Trigger.from_object(trigger)
    module, _, name = row.classpath.rpartition(".")
    return getattr(importlib.import_module(module), name)(**row.kwargs)


def test_metric_tags_round_trip_into_the_same_job_metrics():
    metrics = JobMetrics("job-1", "dag", "train", "horovod")
    trigger = TrainingJobTrigger("job-1", "local", options={"poll_interval": 0.5}, state={"cursor": 3},
                                 state_key={"dag_id": "dag", "task_id": "train", "run_id": "r", "map_index": -1},
                                 metric_tags=metrics.tags)
    rebuilt = stored_and_rebuilt(trigger)
    assert rebuilt.serialize() == trigger.serialize()
    assert rebuilt.metric_tags == {"dag_id": "dag", "task_id": "train", "job": "job-1", "framework": "horovod"}
    assert JobMetrics(**rebuilt.metric_tags).tags == metrics.tags

