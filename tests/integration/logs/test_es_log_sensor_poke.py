"""ElasticsearchLogSensor in poke mode: rides out an Elasticsearch outage from its cursor, then
decides; fails (retryably) once an outage outlasts the grace period (double and real)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.sdk.exceptions import AirflowException
from es_logs_support import T0, connection_env, line_doc, load, training_log

from airflow_ml_provider.sensors.elasticsearch_log import ElasticsearchLogSensor

pytestmark = pytest.mark.integration


class RecordingTI:
    """Stands in for the task instance's xcom_push only; records what the sensor pushes."""

    def __init__(self) -> None:
        self.pushed: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.pushed[key] = value


def sensor(monkeypatch, url: str, index: str, **kwargs) -> ElasticsearchLogSensor:
    monkeypatch.setenv("AIRFLOW_CONN_ES_POKE", connection_env(url, index_pattern=index, settle_s=0))
    return ElasticsearchLogSensor(task_id="watch", job="job-poke", elasticsearch_conn_id="es_poke",
                                  follow={"rules": {"succeed_on": ["Training finished"],
                                                    "metrics": [r"loss=(?P<loss>[0-9.]+)"]}, **kwargs},
                                  deferrable=False, poke_interval=0.01)


def test_poke_rides_out_an_outage_and_continues_from_its_cursor(es, index, proxy, monkeypatch):
    docs = training_log("job-poke", pods=2, lines=120)
    docs[60]["message"] = "loss=0.5"
    load(es, index, docs)
    watch, context = sensor(monkeypatch, proxy.url, index), {"ti": RecordingTI()}
    assert watch.poke(context) is False  # the 120 lines so far, no verdict
    proxy.set_mode("unavailable")
    assert watch.poke(context) is False  # a warning, not a failure
    proxy.set_mode("forward")
    ending = line_doc("job-poke", "job-poke-worker-0", 10_000, "Training finished", T0 + timedelta(seconds=1))
    load(es, index, [ending])
    done = watch.poke(context)
    assert done.is_done and done.xcom_value["line"] == "Training finished"
    assert context["ti"].pushed["metrics"]["last"] == {"loss": 0.5}


def test_poke_fails_once_an_outage_outlasts_the_grace_period(es, index, proxy, monkeypatch):
    load(es, index, training_log("job-poke", pods=1, lines=5))
    watch, context = sensor(monkeypatch, proxy.url, index, outage_grace_s=0.2), {"ti": RecordingTI()}
    proxy.set_mode("refuse")
    with pytest.raises(AirflowException, match="longer than the 0.2 s grace period"):
        for _ in range(100):
            watch.poke(context)
