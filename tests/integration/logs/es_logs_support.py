"""Log documents for the Elasticsearch contract tests: Filebeat-shaped lines, bulk loading, connections."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit

from elasticsearch import Elasticsearch

from airflow_ml_provider.logs import ecs

REAL_URL = os.environ.get("ELASTICSEARCH_URL")
JOB_LABEL = "ml.airflow.apache.org/job-name"
T0 = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)


def line_doc(job: str, pod: str, offset: int, message: str, at: datetime, namespace: str = "ml") -> dict:
    """One Filebeat document of ``pod``'s container log (its file path is the pod's)."""
    return ecs.document(timestamp=at, message=message, pod=pod, namespace=namespace, labels={JOB_LABEL: job},
                        file_path=f"/var/log/containers/{pod}_{namespace}_worker.log", offset=offset,
                        host="node-1")


def load(es: Elasticsearch, index: str, docs: Iterable[dict], chunk: int = 20_000) -> int:
    """Bulk-index ``docs`` in large requests, refreshing once at the end so all are searchable."""
    batch: list[bytes] = []
    count = 0
    action = json.dumps({"create": {"_index": index}}).encode()

    def flush() -> None:
        response = es.bulk(operations=b"\n".join(batch) + b"\n")
        assert not response["errors"], [i for i in response["items"] if "error" in next(iter(i.values()))][:3]
        batch.clear()

    for doc in docs:
        batch += (action, json.dumps(doc).encode())
        count += 1
        if count % chunk == 0:
            flush()
    if batch:
        flush()
    es.indices.refresh(index=index)
    return count


def training_log(job: str, pods: int, lines: int, start: datetime = T0) -> list[dict]:
    """A job's log as ``pods`` pods print it, round-robin, one line per pod per millisecond, in
    timestamp order; line i's text is ``line i``."""
    offsets = [0] * pods
    docs = []
    for i in range(lines):
        pod = i % pods
        message = f"line {i}"
        at = start + timedelta(milliseconds=i // pods)
        docs.append(line_doc(job, f"{job}-worker-{pod}", offsets[pod], message, at))
        offsets[pod] += len(message) + 1
    return docs


def connection_env(url: str, **extra) -> str:
    """An ``elasticsearch`` Airflow connection (AIRFLOW_CONN_* JSON) for ``url``."""
    parts = urlsplit(url)
    return json.dumps({"conn_type": "elasticsearch", "host": parts.hostname, "port": parts.port,
                       "schema": parts.scheme, "login": parts.username, "password": parts.password,
                       "extra": extra})
