"""JobMetrics turns follower steps into metric calls: a counter per state change, a gauge per metric
point, and throughput between reports (against a real StatsD logger writing to a loopback socket)."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

import pytest

from airflow_ml_provider.jobs.state import JobState, JobStatus
from airflow_ml_provider.observability import JobMetrics


@dataclass
class FakeStep:  # the fields of jobs.follow.Step that JobMetrics reads
    status: JobStatus | None = None
    points: list = field(default_factory=list)


@pytest.fixture
def datagrams(monkeypatch):
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(sock.getsockname()[1]))
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)

    def read() -> list[str]:
        lines = []
        try:
            while True:
                lines += sock.recv(65536).decode().splitlines()
        except TimeoutError:
            return lines

    yield read
    stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
    sock.close()


def test_state_changes_points_and_throughput(datagrams):
    now = [100.0]
    metrics = JobMetrics("job-1", "dag", "task", "lightgbm", clock=lambda: now[0])
    running = JobStatus(JobState.RUNNING)
    metrics(FakeStep(running, [("loss", 10, 0.5), ("auc", 10, 0.8)]))
    now[0] = 104.0
    metrics(FakeStep(running, [("loss", 30, 0.25)]))  # 20 steps in 4 s
    metrics(FakeStep(JobStatus(JobState.SUCCEEDED)))
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
    JobMetrics("job-1", "dag", "task", "generic")(FakeStep(JobStatus(JobState.RUNNING)))
    assert "Could not emit training metrics for job job-1: no route to host" in caplog.text
