"""Training metrics go out through Airflow's own metrics: StatsD pointed at a loopback UDP socket (with
InfluxDB-style tags), a real job run with dag.test(), and the datagrams read back."""

from __future__ import annotations

import re

import pytest
from dag_runs import load_dag, run
from statsd_support import loopback_statsd

from support import TEST_DAGS

pytestmark = pytest.mark.integration


@pytest.fixture
def statsd(monkeypatch):
    """Airflow's stats configured as a task process configures them, sending to a socket we read."""
    yield from loopback_statsd(monkeypatch, STATSD_PREFIX="airflow", STATSD_INFLUXDB_ENABLED="True")


@pytest.mark.parametrize("dag_name, dag_id", [("metrics_dag", "ml_metrics_test"),
                                               ("metrics_deferred_dag", "ml_metrics_test_deferred")])
def test_loss_throughput_and_state_changes_reach_statsd(airflow_db, statsd, dag_name, dag_id):
    """The same names and tags whether the worker follows the job or (deferred) the triggerer does."""
    result = run(load_dag(TEST_DAGS / "ml_metrics_test_dags.py", dag_name))
    assert result.state == "success", result.states
    job = result.value("train")["job_name"]
    tags = f",dag_id={dag_id},task_id=train,job={job},framework=generic"
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
