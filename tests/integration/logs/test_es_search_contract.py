"""What the Elasticsearch log reader asks of a search, checked against the test double and, with
``ELASTICSEARCH_URL`` set, a real Elasticsearch: ``_source`` includes and ``filter_path`` (the reader
reads only the fields it names, and an answer without hits must still say ``timed_out``)."""

from __future__ import annotations

import pytest
from es_logs_support import T0, line_doc, load

from airflow_ml_provider.logs.elasticsearch import _IDS_PATH, _PAGE_PATH, ElasticsearchLogSource

pytestmark = pytest.mark.integration


def search(es, index, filter_path, job="job-f"):
    source = ElasticsearchLogSource(es, index, job)
    return es.search(index=index, query=source.query(), sort=source.sort(), size=10, track_total_hits=False,
                     source=["message", "kubernetes.pod.name"], filter_path=filter_path).body


def test_filter_path_keeps_only_the_named_fields_of_each_hit(es, index):
    load(es, index, [line_doc("job-f", "pod-a", 0, "first", T0), line_doc("job-f", "pod-b", 0, "second", T0)])
    page = search(es, index, _PAGE_PATH)
    assert set(page) == {"timed_out", "hits"} and set(page["hits"]) == {"hits"}
    assert [set(hit) for hit in page["hits"]["hits"]] == [{"_source", "sort"}] * 2
    # _source includes: the two fields asked for, nested as the document has them
    assert sorted(hit["_source"]["message"] for hit in page["hits"]["hits"]) == ["first", "second"]
    assert page["hits"]["hits"][0]["_source"] == {"message": page["hits"]["hits"][0]["_source"]["message"],
                                                  "kubernetes": {"pod": {"name": "pod-a"}}}
    with_ids = search(es, index, _IDS_PATH)
    assert [set(hit) for hit in with_ids["hits"]["hits"]] == [{"_source", "sort", "_index", "_id"}] * 2
    assert {hit["_index"] for hit in with_ids["hits"]["hits"]} == {index}


def test_a_filtered_answer_without_hits_still_says_timed_out(es, index):
    load(es, index, [line_doc("job-f", "pod-a", 0, "first", T0)])
    page = search(es, index, _IDS_PATH, job="no-such-job")
    assert page["timed_out"] is False
    assert page.get("hits", {}).get("hits", []) == []  # Elasticsearch drops the emptied "hits" altogether
