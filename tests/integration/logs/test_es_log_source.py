"""ElasticsearchLogSource contract: one job's lines from all pods, in order, each once, from a cursor
that survives pages, JSON, outages and new lines arriving (double and real Elasticsearch)."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone

import pytest
from elasticsearch import Elasticsearch
from es_logs_support import T0, line_doc, load, training_log

from airflow_ml_provider.logs.elasticsearch import ElasticsearchLogSource
from airflow_ml_provider.logs.source import LogSourceUnavailable

pytestmark = pytest.mark.integration


def read_all(source: ElasticsearchLogSource, cursor=None, max_lines: int = 5000) -> tuple[list[str], dict]:
    """Every line after ``cursor`` until a read comes back empty, as ``[source] text``."""
    seen = []
    while True:
        batch = source.read(cursor, max_lines)
        if not batch.lines:
            return seen, cursor
        seen += [str(line) for line in batch.lines]
        cursor = batch.cursor


def test_lines_of_all_pods_come_back_in_order_once(es, index):
    at = T0
    docs = [
        line_doc("job-a", "pod-b", 0, "b0 first", at),
        line_doc("job-a", "pod-a", 0, "a0 same ms and offset as b0: the file path breaks the tie", at),
        line_doc("job-a", "pod-a", 60, "a1 same ms, later offset", at),
        line_doc("job-a", "pod-c", 0, "c0", at + timedelta(milliseconds=1)),
        line_doc("job-a", "pod-b", 9, "b1", at + timedelta(milliseconds=2)),
        line_doc("job-a", "pod-b", 9, "b1", at + timedelta(milliseconds=2)),  # a second document, same key
        line_doc("job-b", "pod-x", 0, "another job's line", at),
        line_doc("job-a", "pod-a", 86, "a2 last", at + timedelta(seconds=3)),
    ]
    random.Random(3).shuffle(docs)  # arrival order is not log order
    load(es, index, docs)
    expected = ["[pod-a] a0 same ms and offset as b0: the file path breaks the tie", "[pod-b] b0 first",
                "[pod-a] a1 same ms, later offset", "[pod-c] c0", "[pod-b] b1", "[pod-b] b1", "[pod-a] a2 last"]
    for max_lines in (1, 2, 5000):  # page boundaries anywhere, including between the two b1 documents
        lines, _ = read_all(ElasticsearchLogSource(es, index, "job-a"), max_lines=max_lines)
        assert lines == expected, max_lines


def test_a_backlog_is_read_in_pages_from_a_json_cursor(es, index):
    load(es, index, training_log("job-p", pods=3, lines=2500))
    first = ElasticsearchLogSource(es, index, "job-p").read(None, 1000)
    assert len(first.lines) == 1000  # a full batch: the reader knows more are ready
    cursor = json.loads(json.dumps(first.cursor))  # what a trigger stores; a new reader continues from it
    rest, _ = read_all(ElasticsearchLogSource(es, index, "job-p"), cursor, max_lines=1000)
    assert [line.text for line in first.lines] + [r.split("] ", 1)[1] for r in rest] == \
        [f"line {i}" for i in range(2500)]


def test_new_lines_are_read_after_the_cursor_as_they_arrive(es, index):
    source = ElasticsearchLogSource(es, index, "job-live")
    assert source.read(None).lines == []  # nothing yet: an empty log, not an error
    cursor, seen = None, []
    for round_ in range(3):  # each round, both pods print 25 more lines
        numbers = range(50 * round_, 50 * round_ + 50)
        load(es, index, [line_doc("job-live", f"pod-{n % 2}", 100 * n, f"line {n}",
                                  T0 + timedelta(milliseconds=n)) for n in numbers])
        batch_lines, cursor = read_all(source, cursor, max_lines=30)
        seen += batch_lines
    assert seen == [f"[pod-{i % 2}] line {i}" for i in range(150)]


def test_a_line_just_printed_is_read_at_once(es, index):
    """No settle window: a read returns everything searchable up to now."""
    now = datetime.now(timezone.utc)
    load(es, index, [line_doc("job-s", "pod-0", 0, "old", now - timedelta(seconds=30)),
                     line_doc("job-s", "pod-1", 0, "just printed", now)])
    source = ElasticsearchLogSource(es, index, "job-s")
    assert source.settle_s == 5.0  # only how long a final read waits after the job ended
    assert [line.text for line in source.read(None).lines] == ["old", "just printed"]


def test_namespace_and_missing_indices(es, index):
    load(es, index, [line_doc("job-n", "pod-0", 0, "in ml", T0),
                     line_doc("job-n", "pod-0", 0, "in other", T0, namespace="other")])
    lines, _ = read_all(ElasticsearchLogSource(es, index, "job-n", namespace="other"))
    assert lines == ["[pod-0] in other"]
    assert ElasticsearchLogSource(es, "no-such-index-*", "job-n").read(None).lines == []


@pytest.mark.parametrize("mode", ["refuse", "unavailable"])
def test_an_outage_raises_unavailable_and_the_same_cursor_continues(es, index, proxy, mode):
    load(es, index, training_log("job-o", pods=2, lines=400))
    source = ElasticsearchLogSource(Elasticsearch(proxy.url, max_retries=0), index, "job-o")
    first = source.read(None, 150)
    proxy.set_mode(mode)
    with pytest.raises(LogSourceUnavailable):
        source.read(first.cursor, 150)
    proxy.set_mode("forward")
    rest, _ = read_all(source, first.cursor, max_lines=150)
    assert [line.text for line in first.lines] + [r.split("] ", 1)[1] for r in rest] == \
        [f"line {i}" for i in range(400)]
