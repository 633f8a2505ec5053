"""Tailing a job's log from Elasticsearch: reader throughput against a bare client, and the latency from a
line being printed to it being in the task log, both at default settings, printed side by side.

(a) Throughput over one job's log of ``--lines`` lines from 4 pods, read to the end, alternating runs:
    bare: the official client's own ``search_after`` loop (same index, query, sort and page size), hits
          counted and nothing else done with them (no ``filter_path``: it decodes ``_index``, ``_id`` and
          ``_score`` per hit, which the reader no longer asks for behind the overlap window);
    source: ElasticsearchLogSource alone (cursor, overlap window, identity de-duplication, LogLines);
    reader: what a deferred task does per line, without printing: the source through the follow core
          (``Follower.observe``: the rules and the metrics tracker; every line here carries a metric).
    Printed: lines/s of each (median wall clock) and reader/bare, source/bare (target: reader/bare
    >= 0.9), with the same ratios in CPU time (this process's, the double's included: steadier on a
    shared machine).
(b) Latency: a writer indexes lines at ``--rate`` lines/s stamped with the time they were "printed";
    the real ElasticsearchLogTrigger (the deferred sensor's trigger, default options: the follow core's
    poll interval, the source's overlap window and settle time) streams them into the task log (its
    stdout, read through a pipe and timestamped on arrival). Printed: p50/p95 of arrival minus print
    time (target: p95 <= 2 s). No settle window delays a line: a read returns everything up to now.

    AIRFLOW_HOME=/tmp/bench-home .venv/bin/python benchmarks/log_tail.py [--lines 100000] [--runs 5]

The cluster is ``ELASTICSEARCH_URL`` if set, else the project's loopback test double (tests/es_double.py,
a Python server: absolute numbers are the double's; the ratio is what the provider adds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import statistics
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import urlsplit

from elasticsearch import Elasticsearch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from airflow_ml_provider import labels  # noqa: E402
from airflow_ml_provider.jobs.follow import Follower, FollowOptions  # noqa: E402
from airflow_ml_provider.logs import ecs  # noqa: E402
from airflow_ml_provider.logs.elasticsearch import ElasticsearchLogSource  # noqa: E402

JOB_LABEL = labels.JOB_NAME
RULES = {"succeed_on": [r"Training finished"], "fail_on": [r"CUDA out of memory", r"NCCL.*timeout"],
         "retry_on": [r"Connection reset by peer"], "metrics": [r"loss=(?P<loss>[0-9.]+)"]}
PAGE = 5000
_SEQ = re.compile(rb"\] \[bench-live-worker-\d\] seq=(\d+) ")


def doc(job: str, pod: int, offset: int, message: str, at: datetime) -> dict:
    return ecs.document(timestamp=at, message=message, pod=f"{job}-worker-{pod}", namespace="bench",
                        labels={JOB_LABEL: job}, file_path=f"/var/log/containers/{job}-worker-{pod}.log",
                        offset=offset, host="node-1")


def load(client: Elasticsearch, index: str, docs: list[dict]) -> None:
    for start in range(0, len(docs), 20_000):
        operations = []
        for d in docs[start:start + 20_000]:
            operations += [{"create": {"_index": index}}, d]
        assert not client.bulk(operations=operations)["errors"]
    client.indices.refresh(index=index)


def bare(client: Elasticsearch, index: str, job: str) -> int:
    source = ElasticsearchLogSource(client, index, job)  # only to reuse the same query and sort
    count, after = 0, None
    while True:
        hits = client.search(index=index, query=source.query(), sort=source.sort(), size=PAGE,
                             search_after=after, source=["message", "kubernetes.pod.name"],
                             track_total_hits=False)["hits"]["hits"]
        if not hits:
            return count
        count += len(hits)
        after = hits[-1]["sort"]


def source_only(client: Elasticsearch, index: str, job: str) -> int:
    source = ElasticsearchLogSource(client, index, job)
    count, cursor = 0, None
    while (batch := source.read(cursor, PAGE)).lines:
        count, cursor = count + len(batch.lines), batch.cursor
    return count


def reader(client: Elasticsearch, index: str, job: str) -> int:
    source = ElasticsearchLogSource(client, index, job)
    follower = Follower(FollowOptions(rules=RULES, max_lines=PAGE))
    count = 0
    while (batch := source.read(follower.cursor, PAGE)).lines:
        count += len(follower.observe(None, batch, time.time()).lines)
    return count


def throughput(client: Elasticsearch, index: str, lines: int, runs: int) -> None:
    job = "bench-backlog"
    t0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
    docs = [doc(job, i % 4, (i // 4) * 64, f"step {i} loss={1 / (i + 1):.6f}",
                t0 + timedelta(milliseconds=i // 4)) for i in range(lines)]
    load(client, index, docs)
    wall: dict[str, list[float]] = {"bare": [], "source": [], "reader": []}
    cpu: dict[str, list[float]] = {"bare": [], "source": [], "reader": []}
    order = [("bare", bare), ("source", source_only), ("reader", reader)]
    for run in range(runs):
        for name, read in order if run % 2 == 0 else order[::-1]:
            start, start_cpu = time.perf_counter(), time.process_time()
            assert read(client, index, job) == lines, name
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    rate = {name: lines / statistics.median(t) for name, t in wall.items()}
    work = {name: statistics.median(t) for name, t in cpu.items()}
    print(f"(a) {lines} lines, {runs} alternating runs each, page {PAGE}, default settings:")
    print(f"    bare client search_after loop: {rate['bare']:10.0f} lines/s")
    print(f"    ElasticsearchLogSource alone:  {rate['source']:10.0f} lines/s")
    print(f"    reader (source + follow core): {rate['reader']:10.0f} lines/s")
    print(f"    reader / bare:                 {rate['reader'] / rate['bare']:10.2f}   (CPU time: "
          f"{work['bare'] / work['reader']:.2f})")
    print(f"    source / bare:                 {rate['source'] / rate['bare']:10.2f}   (CPU time: "
          f"{work['bare'] / work['source']:.2f})")


def latency(es_url: str, client: Elasticsearch, index: str, rate: float,
            seconds: float) -> tuple[float, float, int]:
    """p50, p95 (s) of task-log arrival minus print time, and how many lines arrived."""
    from airflow_ml_provider.triggers.elasticsearch_log import ElasticsearchLogTrigger

    job = "bench-live"
    printed: dict[int, float] = {}
    arrived: dict[int, float] = {}
    conn_id = f"bench_{uuid.uuid4().hex[:6]}"
    url = urlsplit(es_url)
    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps({
        "conn_type": "elasticsearch", "host": url.hostname, "port": url.port, "schema": url.scheme,
        "login": url.username, "password": url.password, "extra": {"index_pattern": index}})

    def write() -> None:
        total = int(rate * seconds)
        for seq in range(total + 1):
            now = time.time()
            message = "Training finished" if seq == total else f"seq={seq} loss={1 / (seq + 1):.6f}"
            printed[seq] = now
            client.index(index=index, document=doc(job, seq % 4, seq * 64, message,
                                                        datetime.fromtimestamp(now, timezone.utc)))
            time.sleep(max(0.0, 1 / rate - (time.time() - now)))

    read_fd, write_fd = os.pipe()
    saved = os.dup(1)

    def collect() -> None:
        buffer = b""
        while chunk := os.read(read_fd, 65536):
            now = time.time()
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            for line in complete:
                if match := _SEQ.search(line):
                    arrived.setdefault(int(match[1]), now)

    collector = threading.Thread(target=collect, daemon=True)
    collector.start()
    writer = threading.Thread(target=write, daemon=True)
    sys.stdout.flush()
    os.dup2(write_fd, 1)
    try:
        writer.start()
        trigger = ElasticsearchLogTrigger(job=job, elasticsearch_conn_id=conn_id,
                                          options=FollowOptions(rules=RULES).to_dict())

        async def run() -> None:
            async for _ in trigger.run():
                return

        asyncio.run(run())
        writer.join()
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(write_fd)
    collector.join(10)
    delays = sorted(arrived[seq] - printed[seq] for seq in arrived)
    return statistics.median(delays), delays[int(0.95 * (len(delays) - 1))], len(delays)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rate", type=float, default=50.0, help="lines/s written in the latency test")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each latency test")
    args = parser.parse_args()
    logging.getLogger("elastic_transport").setLevel(logging.WARNING)  # one line per request otherwise
    double = None
    es_url = os.environ.get("ELASTICSEARCH_URL")
    if not es_url:
        from es_double import ElasticsearchDouble

        double = ElasticsearchDouble().start()
        es_url = double.url
    client = Elasticsearch(es_url, request_timeout=60)
    print(f"cluster: {'test double' if double else es_url} ({client.info()['version']['number']})")
    indices = []
    try:
        index = f"bench-logs-{uuid.uuid4().hex[:8]}"
        indices.append(index)
        client.indices.create(index=index, mappings=ecs.mappings())
        throughput(client, index, args.lines, args.runs)
        index = f"bench-live-{uuid.uuid4().hex[:8]}"
        indices.append(index)
        client.indices.create(index=index, mappings=ecs.mappings())
        p50, p95, count = latency(es_url, client, index, args.rate, args.seconds)
        print(f"(b) line-to-task-log latency through the deferred sensor's trigger, {args.rate:g} lines/s "
              f"for {args.seconds:g} s, default settings (poll every {FollowOptions().poll_interval:g} s, "
              f"overlap window {ElasticsearchLogSource(client, index, job='x').overlap_s:g} s):")
        print(f"    p50 {p50:.2f} s, p95 {p95:.2f} s ({count} lines)")
    finally:
        for index in indices:
            client.indices.delete(index=index, ignore_unavailable=True)
        if double:
            double.stop()


if __name__ == "__main__":
    main()
