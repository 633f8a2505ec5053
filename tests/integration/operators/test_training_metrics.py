"""Training metrics go out through Airflow's own metrics: StatsD pointed at a loopback UDP socket (with
InfluxDB-style tags), a real job run with dag.test(), and the datagrams read back."""

from __future__ import annotations

import re
import socket

import pytest
from dag_runs import load_dag, run
from support import TEST_DAGS

pytestmark = pytest.mark.integration


@pytest.fixture
def statsd(monkeypatch):
    """Airflow's stats configured as a task process configures them, sending to a socket we read."""
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    for key, value in {"STATSD_ON": "True", "STATSD_HOST": "127.0.0.1", "STATSD_PORT": str(sock.getsockname()[1]),
                       "STATSD_PREFIX": "airflow", "STATSD_INFLUXDB_ENABLED": "True"}.items():
        monkeypatch.setenv(f"AIRFLOW__METRICS__{key}", value)
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)

    def received() -> list[str]:
        lines = []
        try:
            while True:
                lines += sock.recv(65536).decode().splitlines()
        except TimeoutError:
            return lines

    yield received
    stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
    sock.close()


def test_loss_throughput_and_state_changes_reach_statsd(airflow_db, statsd):
    result = run(load_dag(TEST_DAGS / "ml_metrics_test_dags.py", "metrics_dag"))
    assert result.state == "success", result.states
    job = result.value("train")["job_name"]
    tags = f",dag_id=ml_metrics_test,task_id=train,job={job},framework=generic"
    datagrams = [line for line in statsd() if line.startswith("airflow.ml_training.")]
    parsed = [re.fullmatch(r"airflow\.ml_training\.([a-z_.]+)" + re.escape(tags) + r":([-0-9.e]+)\|(g|c)", line)
              for line in datagrams]
    assert all(parsed), [line for line, match in zip(datagrams, parsed) if not match]
    by_name: dict[str, list[float]] = {}
    for match in parsed:
        by_name.setdefault(match[1], []).append(float(match[2]))
    assert by_name["job_state.succeeded"] == [1.0]
    assert "job_state.running" in by_name or "job_state.pending" in by_name
    assert by_name["metric.loss"] == [1.0, 0.5, pytest.approx(1 / 3), 0.25]  # every point, in order
    # reports 1.5 s apart are read in different rounds (a 1 s poll): a rate between each two
    assert by_name["steps_per_second"] and all(rate > 0 for rate in by_name["steps_per_second"])
