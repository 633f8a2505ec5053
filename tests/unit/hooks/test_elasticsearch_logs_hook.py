"""ElasticsearchLogsHook: the standard connection's fields and extras, credentials kept out of sight."""

from __future__ import annotations

import json

import pytest

from airflow_ml_provider.hooks.elasticsearch_logs import ElasticsearchLogsHook


def use_connection(monkeypatch, **fields) -> ElasticsearchLogsHook:
    monkeypatch.setenv("AIRFLOW_CONN_ES_UNIT", json.dumps({"conn_type": "elasticsearch", **fields}))
    return ElasticsearchLogsHook("es_unit")


def test_url_from_host_port_and_schema_without_credentials(monkeypatch):
    hook = use_connection(monkeypatch, host="https://elastic:hunter2@es.example.com", port=9243)
    assert hook.url == "https://es.example.com:9243"
    assert use_connection(monkeypatch, host="es.local", schema="http").url == "http://es.local:9200"


def test_basic_auth_or_api_key_reach_the_client_only(monkeypatch):
    hook = use_connection(monkeypatch, host="es.local", login="elastic", password="s3cr3t-pa55")
    assert hook.client._headers["authorization"].startswith("Basic ")
    assert "s3cr3t-pa55" not in repr(hook.client) + hook.url
    hook = use_connection(monkeypatch, host="es.local", login="elastic", password="x",
                          extra={"api_key": "k3y"})
    assert hook.client._headers["authorization"] == "ApiKey k3y"


def test_extras_shape_the_log_source(monkeypatch):
    hook = use_connection(monkeypatch, host="es.local", extra={
        "index_pattern": "logs-ml-*", "settle_s": 2, "overlap_s": "90", "fields": {"job": "labels.job"}})
    source = hook.log_source("job-1", namespace="team-a")
    assert (source.index, source.settle_s, source.overlap_s) == ("logs-ml-*", 2.0, 90.0)
    assert source.fields.job == "labels.job"
    assert source.query()["bool"]["filter"][:2] == [{"term": {"labels.job": "job-1"}},
                                                    {"term": {"kubernetes.namespace": "team-a"}}]
    assert hook.log_source("job-1", index="other-*").index == "other-*"


@pytest.mark.parametrize(
    ("fields", "message"),
    [({"host": ""}, "has no host"),
     ({"host": "es.local", "schema": "ftp"}, "scheme must be http or https"),
     ({"host": "es.local", "extra": {"fields": {"pod": "x"}}}, "extra fields: unknown field name"),
     ({"host": "es.local", "extra": {"overlap_s": "a minute"}}, "extra overlap_s: a number of seconds"),
     ({"host": "es.local", "extra": {"settle_s": -1}}, "extra settle_s: a number of seconds >= 0, got -1")],
)
def test_bad_connections_say_what_is_wrong(monkeypatch, fields, message):
    with pytest.raises(ValueError, match=message):
        use_connection(monkeypatch, **fields).log_source("job")
