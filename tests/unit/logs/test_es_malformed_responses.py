"""An Elasticsearch answer the reader cannot use (a proxy's page, a truncated or foreign body) is a
retryable "unavailable", named, never a raw KeyError: the official client against a loopback server
that answers every request with one canned body."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from elasticsearch import Elasticsearch

from airflow_ml_provider.logs.elasticsearch import ElasticsearchLogSource, pack_seen, unpack_seen
from airflow_ml_provider.logs.source import LogSourceUnavailable

OK = {"timed_out": False}  # in every answer, whatever its filter_path: the reader looks for it
HIT = {"_index": "logs", "_id": "a1", "_source": {"message": "hello", "kubernetes": {"pod": {"name": "p"}}}}


def serve(body: bytes, content_type: str = "application/json"):
    class Canned(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("X-Elastic-Product", "Elasticsearch")
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Canned)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


NOW = "@now"  # in a body: the time of the read in ms, inside the overlap window (a hit kept by identity)


def at_read_time(body: str) -> str:
    return body.replace(f'"{NOW}"', str(int(time.time() * 1000)))


@pytest.mark.parametrize(("body", "content_type", "says"), [
    (json.dumps({"took": 1}), "application/json", "without hits.hits"),
    (json.dumps({"hits": {"total": 3}}), "application/json", "without hits.hits"),
    (json.dumps({**OK, "hits": {"hits": [HIT]}}), "application/json", "3 sort values.*KeyError: 'sort'"),
    (json.dumps({**OK, "hits": {"hits": [{**HIT, "sort": [NOW, 0]}]}}), "application/json", "without 3 sort values"),
    (json.dumps({**OK, "hits": {"hits": [{**HIT, "sort": ["2026-01-05", 0, "f"]}]}}), "application/json",
     "3 sort values.*TypeError"),
    (json.dumps({**OK, "hits": {"hits": [{"_index": "logs", "sort": [NOW, 0, "f"]}]}}), "application/json",
     "_id.*KeyError: '_id'"),
    (json.dumps({**OK, "hits": {"hits": ["not a hit"]}}), "application/json", "3 sort values.*TypeError"),
    (json.dumps([{"hits": []}]), "application/json", "without hits.hits"),
    ("<html>gateway</html>", "text/html", "without hits.hits"),
    ('{"hits": {"hits": [', "application/json", "unreachable"),  # truncated JSON
])
def test_a_malformed_answer_is_unavailable_with_a_clear_message(body, content_type, says):
    server = serve(at_read_time(body).encode(), content_type)
    try:
        client = Elasticsearch(f"http://127.0.0.1:{server.server_address[1]}", max_retries=0)
        with pytest.raises(LogSourceUnavailable, match=says):
            ElasticsearchLogSource(client, "logs", "job-1").read(None)
    finally:
        server.shutdown()
        server.server_close()


def test_a_malformed_answer_to_the_late_lines_fetch_is_unavailable():
    """The overlap window finds a document not delivered yet; fetching it (mget) gets a search answer."""
    now = int(time.time() * 1000)
    server = serve(json.dumps({**OK, "hits": {"hits": [{**HIT, "sort": [now, 0, "f"]}]}}).encode())
    try:
        client = Elasticsearch(f"http://127.0.0.1:{server.server_address[1]}", max_retries=0)
        cursor = {"after": [now + 1, 0, "f"], "read_at": time.time(), "seen": {}, "floor": None}
        with pytest.raises(LogSourceUnavailable, match="KeyError: 'docs'"):
            ElasticsearchLogSource(client, "logs", "job-1").read(cursor)
    finally:
        server.shutdown()
        server.server_close()


def test_the_seen_digests_pack_small_and_read_back_in_either_form():
    """The cursor's digests by millisecond: packed (about 11 bytes a line), and the JSON lists an earlier
    version saved are still read (a task deferred across an upgrade continues without repeats)."""
    seen = {1_700_000_000_000: {"AbCdEfGh", "-_0123ab"}, 1_700_000_000_010: {"zzzzzzzz"}, -5: {"aaaaaaaa"}}
    packed = pack_seen(seen)
    assert unpack_seen(packed) == seen
    assert len(packed) < 12 * 4 + 12  # four digests, their groups' millisecond deltas and separators
    assert unpack_seen({str(ts): sorted(ids) for ts, ids in seen.items()}) == seen
    assert unpack_seen(None) == {} and unpack_seen("") == {}
