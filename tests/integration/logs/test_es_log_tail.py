"""The Elasticsearch tail at the edge of now: lines shipped late are delivered once, documents with equal
sort keys are distinct lines, another namespace's pods are ignored, and the cursor stays bounded (double
and real Elasticsearch)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from es_logs_support import T0, connection_env, line_doc, load, training_log
from kubernetes.client import ApiClient

from airflow_ml_provider.hooks.elasticsearch_logs import job_log_source
from airflow_ml_provider.jobs.backends.kubernetes.indexed_job import IndexedJobBackend
from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.logs.ecs import LOCAL_NAMESPACE
from airflow_ml_provider.logs.elasticsearch import ElasticsearchLogSource, unpack_seen

pytestmark = pytest.mark.integration


def read_all(source, cursor=None, max_lines: int = 5000) -> tuple[list[str], dict]:
    """Every line after ``cursor`` until a read comes back empty (the cursor JSON round-tripped each time,
    as a trigger stores it), as ``[source] text``."""
    seen = []
    while True:
        batch = source.read(cursor, max_lines)
        cursor = json.loads(json.dumps(batch.cursor))
        if not batch.lines:
            return seen, cursor
        seen += [str(line) for line in batch.lines]


def test_a_line_shipped_30_s_late_is_delivered_once(es, index):
    now = datetime.now(timezone.utc)
    printed = [now - timedelta(seconds=14 - n) for n in range(5)]
    load(es, index, [line_doc("job-late", "pod-0", 10 * n, f"line {n}", at) for n, at in enumerate(printed)])
    source = ElasticsearchLogSource(es, index, "job-late")
    lines, cursor = read_all(source)
    assert lines == [f"[pod-0] line {n}" for n in range(5)]

    # pod-1's shipper was stuck: its line, stamped 30 s before the latest line read, arrives only now
    load(es, index, [line_doc("job-late", "pod-1", 0, "late by 30 s", printed[-1] - timedelta(seconds=30))])
    load(es, index, [line_doc("job-late", "pod-0", 50, "line 5", now - timedelta(seconds=8))])
    later, cursor = read_all(source, cursor)
    assert later == ["[pod-1] late by 30 s", "[pod-0] line 5"]  # found late, after the lines shown already
    again, _ = read_all(ElasticsearchLogSource(es, index, "job-late"), cursor)  # a new reader, same cursor
    assert again == []


@pytest.mark.parametrize("max_lines", [3, 5000])
def test_a_backlog_read_into_the_window_delivers_late_lines_once(es, index, max_lines):
    # Full pages behind the window are read without documents' identities; the window's lines, reached
    # in the same reads, must still be remembered, or a late line's search would return them again.
    now = datetime.now(timezone.utc)
    old = [line_doc("job-bw", "pod-0", n, f"old {n}", T0 + timedelta(milliseconds=n)) for n in range(7)]
    recent = [line_doc("job-bw", "pod-0", 100 + n, f"recent {n}", now - timedelta(seconds=10 - n))
              for n in range(5)]
    load(es, index, old + recent)
    source = ElasticsearchLogSource(es, index, "job-bw")
    lines, cursor = read_all(source, max_lines=max_lines)
    assert lines == [f"[pod-0] old {n}" for n in range(7)] + [f"[pod-0] recent {n}" for n in range(5)]
    load(es, index, [line_doc("job-bw", "pod-1", 0, "late", now - timedelta(seconds=20))])
    later, _ = read_all(source, cursor, max_lines=max_lines)
    assert later == ["[pod-1] late"]


@pytest.mark.parametrize("max_lines", [1, 2, 5000])
def test_distinct_lines_with_equal_keys_are_all_delivered(es, index, max_lines):
    same = {"pod": "pod-a", "offset": 0, "at": T0 + timedelta(milliseconds=1)}  # one file path, offset, time
    load(es, index, [line_doc("job-eq", message="before", pod="pod-a", offset=0, at=T0),
                     *(line_doc("job-eq", message=f"copy {n}", **same) for n in range(3)),
                     line_doc("job-eq", message="after", pod="pod-a", offset=9, at=same["at"])])
    lines, _ = read_all(ElasticsearchLogSource(es, index, "job-eq"), max_lines=max_lines)
    assert lines[0] == "[pod-a] before" and lines[-1] == "[pod-a] after"
    assert sorted(lines[1:-1]) == ["[pod-a] copy 0", "[pod-a] copy 1", "[pod-a] copy 2"]


def test_a_document_arriving_with_the_key_of_the_last_line_read_is_delivered(es, index):
    at = datetime.now(timezone.utc) - timedelta(seconds=2)
    load(es, index, [line_doc("job-tie", "pod-0", 0, "first", at)])
    source = ElasticsearchLogSource(es, index, "job-tie")
    lines, cursor = read_all(source)
    load(es, index, [line_doc("job-tie", "pod-0", 0, "same key, another document", at)])
    later, _ = read_all(source, cursor)
    assert (lines, later) == (["[pod-0] first"], ["[pod-0] same key, another document"])


def test_the_cursor_stays_bounded_over_100k_recent_lines(es, index):
    start = datetime.now(timezone.utc) - timedelta(seconds=40)  # all inside the overlap window
    load(es, index, training_log("job-big", pods=4, lines=100_000, start=start))
    source = ElasticsearchLogSource(es, index, "job-big", max_seen=2000)
    cursor, texts, largest = None, [], 0
    while (batch := source.read(cursor)).lines:
        texts += [line.text for line in batch.lines]
        cursor = batch.cursor
        assert sum(map(len, unpack_seen(cursor["seen"]).values())) <= 2000
        largest = max(largest, len(json.dumps(cursor)))
    assert texts == [f"line {i}" for i in range(100_000)]  # past the cap too: none lost, none repeated
    assert largest < 2000 * 12  # about 11 bytes per line remembered (packed: see pack_seen)


def test_job_log_source_reads_only_the_backends_namespace(es, es_url, index, monkeypatch, tmp_path):
    load(es, index, [line_doc("job-ns", "job-ns-worker-0", 0, "ours", T0, namespace="ml"),
                     line_doc("job-ns", "job-ns-rank-0", 1, "ours, shipped from the local backend", T0,
                              namespace=LOCAL_NAMESPACE),
                     line_doc("job-ns", "intruder", 0, "NCCL timeout (a fake fail_on line)", T0, namespace="team-b")])
    monkeypatch.setenv("AIRFLOW_CONN_ES_NS", connection_env(es_url, index_pattern=index))
    kubernetes = job_log_source(IndexedJobBackend(ApiClient(), namespace="ml"), "job-ns", "es_ns")
    assert read_all(kubernetes)[0] == ["[job-ns-worker-0] ours"]
    local = job_log_source(LocalBackend(tmp_path / "ml"), "job-ns", "es_ns")  # the local jobs' namespace only
    assert read_all(local)[0] == ["[job-ns-rank-0] ours, shipped from the local backend"]
