"""Following a job: its new log lines and its status, in the one order that loses no line."""

from __future__ import annotations

from collections import deque
from typing import Any

from airflow_ml_provider.jobs.backends.base import Backend
from airflow_ml_provider.jobs.state import JobStatus
from airflow_ml_provider.logs.metrics import MetricsCollector
from airflow_ml_provider.logs.source import LogLine


class JobFollower:
    """Reads a job's status, then its new lines. Because the status is read first, an empty read
    after a terminal status means the log is complete: every line has been returned exactly once."""

    def __init__(self, backend: Backend, name: str, cursor: Any = None):
        self.backend = backend
        self.name = name
        self.source = backend.log_source(name)
        self.cursor = cursor

    def step(self) -> tuple[list[LogLine], JobStatus]:
        status = self.backend.status(self.name)
        batch = self.source.read(self.cursor)
        self.cursor = batch.cursor
        return batch.lines, status


def summarize_log(backend: Backend, name: str, tail: int = 20) -> tuple[MetricsCollector, list[LogLine]]:
    """One pass over a finished job's log: its metrics and its last lines (for failure messages)."""
    source = backend.log_source(name)
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
