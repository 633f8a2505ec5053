"""ElasticsearchLogSensor arguments: mistakes fail when the DAG is parsed, naming the argument."""

from __future__ import annotations

import pytest

from airflow_ml_provider.sensors.elasticsearch_log import ElasticsearchLogSensor


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"succeed_on": []}, "succeed_on: give at least one pattern"),
     ({"fail_on": ["NCCL("]}, r"fail_on\[0\]: invalid regular expression"),
     ({"metrics": ["loss=([0-9.]+)"]}, r"metrics\[0\]: .* has no named group"),
     ({"metric_goals": {"auc": "higher"}}, r"metric_goals\['auc'\]"),
     ({"mode": "reschedule"}, "mode='reschedule' would re-read the log")],
)
def test_bad_arguments_fail_at_parse_time(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ElasticsearchLogSensor(task_id="watch", job="job", **{"succeed_on": ["done"], **kwargs})


def test_templated_fields_and_defaults():
    sensor = ElasticsearchLogSensor(task_id="watch", job="{{ ti.xcom_pull('train')['job_name'] }}",
                                    succeed_on=["done"])
    assert {"job", "succeed_on", "fail_on", "retry_on", "metrics"} <= set(sensor.template_fields)
    assert (sensor.poke_interval, sensor.outage_grace_period, sensor.elasticsearch_conn_id) == \
        (1.0, 600.0, "elasticsearch_default")
