"""JobMetrics turns follower steps into metric calls: a counter per state change, a gauge per metric
point, and throughput between reports (against a real StatsD logger writing to a loopback socket)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from statsd_support import loopback_statsd

from airflow_ml_provider.jobs.state import JobState, JobStatus
from airflow_ml_provider.observability import JobMetrics


@dataclass
class FakeDecision:  # the fields of jobs.follow.Decision that JobMetrics reads
    status: JobStatus | None = None
    points: list = field(default_factory=list)


@pytest.fixture
def datagrams(monkeypatch):
    yield from loopback_statsd(monkeypatch)

def test_state_changes_points_and_throughput(datagrams):
    now = [100.0]
    metrics = JobMetrics("job-1", "dag", "task", "lightgbm", clock=lambda: now[0])
    running = JobStatus(JobState.RUNNING)
    metrics(FakeDecision(running, [("loss", 10, 0.5), ("auc", 10, 0.8)]))
    now[0] = 104.0
    metrics(FakeDecision(running, [("loss", 30, 0.25)]))  # 20 steps in 4 s
    metrics(FakeDecision(JobStatus(JobState.SUCCEEDED)))
    assert datagrams() == [
        "airflow.ml_training.job_state.running:1|c",
        "airflow.ml_training.metric.loss:0.5|g",
        "airflow.ml_training.metric.auc:0.8|g",
        "airflow.ml_training.metric.loss:0.25|g",
        "airflow.ml_training.steps_per_second:5.0|g",
        "airflow.ml_training.job_state.succeeded:1|c",
    ]


def test_a_broken_metrics_backend_never_breaks_following(monkeypatch, caplog):
    from airflow.sdk.observability import stats

    def broken(*args, **kwargs):
        raise OSError("no route to host")

    monkeypatch.setattr(stats, "incr", broken)
    JobMetrics("job-1", "dag", "task", "generic")(FakeDecision(JobStatus(JobState.RUNNING)))
    assert "Could not emit training metrics for job job-1: no route to host" in caplog.text
