"""ElasticsearchLogSensor arguments: mistakes fail when the DAG is parsed, naming the argument; it takes
``follow=`` as the training operators do, and the flat arguments of earlier releases still work, deprecated."""

from __future__ import annotations

import pytest
from airflow.exceptions import AirflowProviderDeprecationWarning

from airflow_ml_provider.sensors.elasticsearch_log import ElasticsearchLogSensor

DONE = {"rules": {"succeed_on": ["done"]}}


@pytest.mark.parametrize(
    ("follow", "message"),
    [({"rules": {"succeed_on": []}}, "follow.rules.succeed_on: give at least one pattern"),
     ({"rules": {"succeed_on": ["done"], "fail_on": ["NCCL("]}}, r"fail_on\[0\]: invalid regular expression"),
     ({"rules": {"succeed_on": ["done"], "metrics": ["loss=([0-9.]+)"]}}, r"metrics\[0\]: .* has no named group"),
     ({**DONE, "metric_goals": {"auc": "higher"}}, r"metric_goals\['auc'\]"),
     ({**DONE, "outage_grace": 5}, r"follow: .*outage_grace"),
     ("done", "follow: expected FollowOptions or a dict")],
)
def test_bad_arguments_fail_at_parse_time_naming_them(follow, message):
    with pytest.raises(ValueError, match=message):
        ElasticsearchLogSensor(task_id="watch", job="job", follow=follow)
    with pytest.raises(ValueError, match="mode='reschedule' would re-read the log"):
        ElasticsearchLogSensor(task_id="watch", job="job", follow=DONE, mode="reschedule")


def test_templated_fields_and_defaults():
    sensor = ElasticsearchLogSensor(task_id="watch", job="{{ ti.xcom_pull('train')['job_name'] }}", follow=DONE)
    assert {"job", "follow"} <= set(sensor.template_fields)
    assert (sensor.poke_interval, sensor.follow["outage_grace_s"], sensor.elasticsearch_conn_id) == \
        (1.0, 600.0, "elasticsearch_default")


def test_the_flat_arguments_of_earlier_releases_still_work_with_a_deprecation_warning():
    with pytest.warns(AirflowProviderDeprecationWarning, match="succeed_on, metrics, outage_grace_period are deprecated"):
        sensor = ElasticsearchLogSensor(task_id="watch", job="job", succeed_on=["done"],
                                        metrics=[r"loss=(?P<loss>[0-9.]+)"], outage_grace_period=30)
    assert sensor.follow["rules"] == {"succeed_on": ["done"], "metrics": [r"loss=(?P<loss>[0-9.]+)"]}
    assert sensor.follow["outage_grace_s"] == 30
