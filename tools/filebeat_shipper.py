"""A developer tool standing in for Filebeat: ships local jobs' log lines to Elasticsearch as the ECS
documents Filebeat writes, so a laptop demo can use the Elasticsearch log path (sensor, operators'
``elasticsearch_conn_id``) end to end. Not part of the library: on a cluster, Filebeat does this.

    python tools/filebeat_shipper.py --url http://localhost:9200 --root $AIRFLOW_HOME/ml
    python tools/filebeat_shipper.py --url ... --root ... --job aml-train-1a2b3c4d5e

With ``--job`` it exits once that job has ended and all its lines are shipped; without, it ships every
job under the root until interrupted. Credentials: in the URL (``https://user:pass@host:9200``) or
``ELASTICSEARCH_API_KEY``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import socket
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from elasticsearch import ApiError, Elasticsearch, TransportError

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.labels import JOB_NAME
from airflow_ml_provider.logs import ecs
from airflow_ml_provider.logs.source import LogLine, LogSourceUnavailable

DEFAULT_INDEX = "filebeat-airflow-ml"  # matches the hook's default index pattern, filebeat-*
MAX_BACKOFF_S = 30.0
log = logging.getLogger("filebeat_shipper")
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


class JobLogShipper:
    """Ships one local job's log, each complete line once, in order, read from the backend's own log
    source (the job's ``output.log``) after its status, so a terminal status followed by an empty read
    means everything is shipped.

    Documents have deterministic ids (job uid and byte offset) and are created, never overwritten, so
    a restarted shipper that sends lines again adds no duplicates (the reader tells documents apart by
    ``_id``). A line's pod is ``<job>-<source>`` (``aml-train-1a2b-rank-0``); its labels are the job's
    labels from ``job.json``.

    The file holds no times, so a line is stamped with the moment the shipper last read the file without
    it: never later than the line was printed, as Filebeat's container timestamps are, and at most a
    poll interval earlier (well inside the reader's overlap window).
    """

    def __init__(self, client: Elasticsearch, index: str, backend: LocalBackend, name: str,
                 namespace: str = ecs.LOCAL_NAMESPACE):
        record = json.loads((backend.job_dir(name) / "job.json").read_text())
        self.client, self.index, self.namespace = client, index, namespace
        self.backend, self.name = backend, name
        self.source = backend.log_source(name)
        self.cursor: Any = None
        self.uid = record["uid"]
        self.job = record["name"]
        self.labels = {JOB_NAME: self.job, **record.get("labels", {})}
        self.path = str(backend.job_dir(name) / "output.log")
        self.host = socket.gethostname()
        self._not_before = datetime.fromtimestamp(record["submitted_at"], timezone.utc)

    def step(self) -> tuple[int, bool]:
        """Ship the lines written since the last step: (lines shipped, whether the job is done and
        fully shipped). Raises LogSourceUnavailable, position unchanged, if Elasticsearch is down."""
        read_at = datetime.now(timezone.utc)
        status = self.backend.status(self.name)
        batch = self.source.read(self.cursor)
        if batch.lines:
            self._bulk(int(self.cursor or 0), batch.lines, batch.cursor)
        self.cursor = batch.cursor
        self._not_before = read_at  # lines missing from this read were printed after it began
        return len(batch.lines), status.state.is_terminal and not batch.lines

    def _bulk(self, start: int, lines: list[LogLine], end: int) -> None:
        operations: list[dict] = []
        for line, offset in zip(lines, _offsets(start, lines, end)):
            pod = f"{self.job}-{_NOT_DNS.sub('-', line.source.lower()).strip('-') or 'job'}"
            operations.append({"create": {"_index": self.index, "_id": f"{self.uid}-{offset}"}})
            operations.append(ecs.document(timestamp=self._not_before, message=line.text, pod=pod,
                                           namespace=self.namespace, labels=self.labels, file_path=self.path,
                                           offset=offset, host=self.host))
        try:
            response = self.client.bulk(operations=operations)
        except TransportError as exc:
            raise LogSourceUnavailable(f"Elasticsearch unreachable: {exc.message}") from exc
        except ApiError as exc:
            if exc.meta.status >= 500 or exc.meta.status == 429:
                raise LogSourceUnavailable(f"Elasticsearch answered {exc.meta.status}") from exc
            raise
        statuses = [item["create"] for item in response["items"]]
        failed = [item for item in statuses if item["status"] not in (200, 201, 409)]  # 409: shipped before
        if failed:
            if all(item["status"] >= 500 or item["status"] == 429 for item in failed):
                raise LogSourceUnavailable(f"Elasticsearch rejected {len(failed)} line(s): {failed[0]}")
            raise RuntimeError(f"Elasticsearch refused {len(failed)} line(s) of job {self.job}: {failed[0]}")


def ensure_index(client: Elasticsearch, index: str) -> None:
    """Create ``index`` with the mapping the reader relies on, unless it (or a template's stream) exists."""
    if not client.indices.exists(index=index):
        try:
            client.indices.create(index=index, mappings=ecs.mappings())
        except ApiError as exc:
            if exc.meta.status != 400:  # 400: someone created it meanwhile
                raise


def ship(client: Elasticsearch, index: str, backend: LocalBackend, *, job: str | None = None,
         stop: threading.Event | None = None, poll_interval: float = 1.0) -> None:
    """Ship ``job`` until it has ended, or every job under the backend's root until ``stop`` is set.
    Elasticsearch outages are waited out with backoff (doubling up to 30 s); nothing is skipped."""
    stop = stop or threading.Event()
    shippers: dict[str, JobLogShipper] = {}
    done: set[str] = set()
    failures = 0
    while not stop.is_set():
        names = [job] if job else sorted(p.name for p in (backend.root / "jobs").glob("*") if p.is_dir())
        busy = False
        try:
            for name in names:
                if name in done or not (backend.job_dir(name) / "job.json").exists():
                    continue
                if name not in shippers:
                    shippers[name] = JobLogShipper(client, index, backend, name)
                shipped, finished = shippers[name].step()
                busy |= bool(shipped)
                if finished:
                    done.add(name)
                    shippers.pop(name)
                    log.info("Shipped job %s completely", name)
        except LogSourceUnavailable as exc:
            failures += 1
            delay = min(poll_interval * 2 ** (failures - 1), MAX_BACKOFF_S)
            log.warning("Elasticsearch unavailable (%s); retrying in %.1f s", exc, delay)
            stop.wait(delay)
            continue
        if failures:
            log.info("Elasticsearch reachable again")
            failures = 0
        if job and job in done:
            return
        if not busy:
            stop.wait(poll_interval)


def _offsets(start: int, lines: list[LogLine], end: int) -> list[int]:
    """Each line's byte offset in the file (the launcher writes ``[source] text\\n``); if the lines do
    not re-encode to exactly the bytes read, still distinct increasing offsets within the read."""
    offsets, position = [], start
    for line in lines:
        offsets.append(position)
        position += len(f"{line}\n".encode())
    return offsets if position == end else list(range(start, start + len(lines)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/filebeat_shipper.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="Elasticsearch URL, e.g. http://localhost:9200")
    parser.add_argument("--index", default=DEFAULT_INDEX, help=f"target index (default {DEFAULT_INDEX})")
    parser.add_argument("--root", default=os.path.join(os.environ.get("AIRFLOW_HOME", "~/airflow"), "ml"),
                        help="the local backend's root (default $AIRFLOW_HOME/ml)")
    parser.add_argument("--job", help="ship this job until it ends, then exit")
    parser.add_argument("--poll-interval", type=float, default=1.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    api_key = os.environ.get("ELASTICSEARCH_API_KEY")
    client = Elasticsearch(args.url, api_key=api_key) if api_key else Elasticsearch(args.url)
    ensure_index(client, args.index)
    backend = LocalBackend(Path(args.root).expanduser())
    try:
        ship(client, args.index, backend, job=args.job, poll_interval=args.poll_interval)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
