"""Following a job: its new log lines and its status, in the one order that loses no line."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from airflow_ml_provider.jobs.backends.base import Backend
from airflow_ml_provider.jobs.state import JobStatus
from airflow_ml_provider.logs.metrics import MetricsCollector
from airflow_ml_provider.logs.source import LogLine, LogSource


class JobFollower:
    """Reads a job's status, then its new lines. Because the status is read first, an empty read
    after a terminal status means the log is complete: every line has been returned exactly once.

    ``source`` replaces the backend's own log (e.g. Elasticsearch). A shipped log may receive a line up
    to ``source.settle_s`` after it was printed, so the first read after a terminal status waits that long.
    """

    def __init__(self, backend: Backend, name: str, cursor: Any = None, source: LogSource | None = None):
        self.backend = backend
        self.name = name
        self.source = source or backend.log_source(name)
        self.cursor = cursor
        self._settled = False

    def step(self) -> tuple[list[LogLine], JobStatus]:
        status = self.backend.status(self.name)
        if status.state.is_terminal and not self._settled:
            time.sleep(getattr(self.source, "settle_s", 0.0))
            self._settled = True
        batch = self.source.read(self.cursor)
        self.cursor = batch.cursor
        return batch.lines, status


def summarize_log(backend: Backend, name: str, tail: int = 20,
                  source: LogSource | None = None) -> tuple[MetricsCollector, list[LogLine]]:
    """One pass over a finished job's log (the backend's own, or ``source``): its metrics and its last
    lines (for failure messages)."""
    source = source or backend.log_source(name)
    collector, last = MetricsCollector(), deque(maxlen=tail)
    cursor = None
    while True:
        batch = source.read(cursor)
        if not batch.lines:
            return collector, list(last)
        for line in batch.lines:
            collector.feed(line)
            last.append(line)
        cursor = batch.cursor
