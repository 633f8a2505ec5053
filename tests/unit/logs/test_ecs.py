"""The ECS layout: field names with overrides, documents as Filebeat writes them, dotted lookups."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from airflow_ml_provider.logs.ecs import EcsFields, document, field, mappings


def test_documents_nest_objects_and_dedot_labels_like_filebeat():
    doc = document(timestamp=datetime(2026, 1, 5, 12, 0, 0, 123456, tzinfo=timezone.utc), message="hello",
                   pod="job-worker-0", namespace="ml", labels={"ml.airflow.apache.org/job-name": "job"},
                   file_path="/var/log/x.log", offset=42, host="node-1")
    names = EcsFields()
    assert doc["@timestamp"] == "2026-01-05T12:00:00.123Z"
    assert doc["kubernetes"]["labels"] == {"ml_airflow_apache_org/job-name": "job"}
    paths = [names.message, names.source, names.namespace, names.job, names.offset, names.tiebreaker]
    assert [field(doc, p) for p in paths] == ["hello", "job-worker-0", "ml", "job", 42, "/var/log/x.log"]


def test_lookups_accept_dotted_keys_too():
    assert field({"log.offset": 7}, "log.offset") == 7
    assert field({"kubernetes": {"pod.name": "p"}}, "kubernetes.pod.name") == "p"
    assert field({"kubernetes": {"pod": {}}}, "kubernetes.pod.name") is None


def test_overrides_are_checked_and_mapped():
    names = EcsFields.from_dict({"job": "labels.job", "source": "container.id"})
    assert (names.job, names.source, names.timestamp) == ("labels.job", "container.id", "@timestamp")
    props = mappings(names)["properties"]
    assert props["labels"]["properties"]["job"] == {"type": "keyword"}
    assert props["@timestamp"] == {"type": "date"}
    assert props["log"]["properties"]["offset"] == {"type": "long"}
    with pytest.raises(ValueError, match=r"fields: unknown field name\(s\) \['pod'\]"):
        EcsFields.from_dict({"pod": "x"})
    with pytest.raises(ValueError, match="non-empty string"):
        EcsFields.from_dict({"job": ""})
