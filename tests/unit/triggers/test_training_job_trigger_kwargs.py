"""Triggers' kwargs survive the triggerer's storage (Airflow's own Trigger row): every argument of each
trigger, and TrainingJobTrigger's metric tags, so a deferred training task's metrics carry the same
tags as a sync one's."""

from __future__ import annotations

import importlib

import pytest

from airflow_ml_provider.observability import JobMetrics
from airflow_ml_provider.triggers.elasticsearch_log import ElasticsearchLogTrigger
from airflow_ml_provider.triggers.search import SearchTrigger
from airflow_ml_provider.triggers.serialized import SerializedTrigger
from airflow_ml_provider.triggers.training_job import TrainingJobTrigger


def stored_and_rebuilt(trigger):
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



ARGUMENTS = {  # every constructor argument of each trigger, none left at its default
    TrainingJobTrigger: dict(job_name="job-1", backend="volcano", ml_conn_id="ml_other", options={"poll_interval": 2},
                             state={"seq": 4}, stream_logs=False, elasticsearch_conn_id="es", owns_job=False,
                             state_key={"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": 1},
                             metric_tags={"job": "job-1"}),
    ElasticsearchLogTrigger: dict(job="job-2", elasticsearch_conn_id="es", options={"settle_s": 1}, namespace="ml",
                                  index="logs-*", state={"seq": 2}, state_key={"dag_id": "d", "task_id": "s"}),
    SearchTrigger: dict(study_name="s", storage_url="journal:///tmp/j", settings={"n_trials": 3},
                        search_space={"x": [1, 2]}, trial_spec={"command": ["python"]}, identity={"dag_id": "d"},
                        backend="local", ml_conn_id="ml_other", follow={"max_preemptions": 1}),
}


@pytest.mark.parametrize("cls", list(ARGUMENTS), ids=lambda cls: cls.__name__)
def test_every_argument_survives_the_triggerers_storage(cls):
    rebuilt = stored_and_rebuilt(cls(**ARGUMENTS[cls]))
    assert type(rebuilt) is cls
    assert {name: getattr(rebuilt, name) for name in ARGUMENTS[cls]} == ARGUMENTS[cls]


def test_an_argument_not_kept_under_its_name_fails_serializing_instead_of_being_dropped():
    class Forgetful(SerializedTrigger):
        def __init__(self, kept: str, renamed: str):
            super().__init__()
            self.kept, self.other = kept, renamed

        async def run(self):
            yield None

    with pytest.raises(AttributeError, match="renamed"):
        Forgetful("a", "b").serialize()
