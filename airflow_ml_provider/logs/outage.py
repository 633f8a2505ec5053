"""Riding out a log store outage: backoff between attempts, and a grace period before giving up."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from airflow_ml_provider.logs.source import LogBatch, LogSource, LogSourceUnavailable


class Outage:
    """One stretch of failed reads. ``failed()`` gives the delay before the next attempt (doubling up
    to ``max_delay``); ``exhausted`` says the stretch has outlasted ``grace_s``; ``recovered()`` ends it."""

    def __init__(self, grace_s: float, first_delay: float = 1.0, max_delay: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        if grace_s < 0:
            raise ValueError(f"outage_grace_period: must be >= 0 seconds, got {grace_s}")
        self.grace_s = grace_s
        self.first_delay = max(first_delay, 0.01)
        self.max_delay = max(max_delay, self.first_delay)
        self._clock = clock
        self.started: float | None = None
        self._failures = 0

    def failed(self) -> float:
        if self.started is None:
            self.started = self._clock()
        self._failures += 1
        return min(self.first_delay * 2 ** (self._failures - 1), self.max_delay)

    @property
    def elapsed(self) -> float:
        return 0.0 if self.started is None else self._clock() - self.started

    @property
    def exhausted(self) -> bool:
        return self.started is not None and self.elapsed > self.grace_s

    def recovered(self) -> float | None:
        """End the stretch; returns how long it lasted, or None if there was none."""
        lasted = None if self.started is None else self.elapsed
        self.started, self._failures = None, 0
        return lasted


class RetryingLogSource(LogSource):
    """A LogSource whose ``read()`` retries through an outage shorter than ``grace_s`` (blocking,
    with backoff and a warning per attempt) and raises LogSourceUnavailable only after it. For
    callers that wait synchronously or in a thread: the operator's wait loop, the training trigger."""

    def __init__(self, source: LogSource, grace_s: float, log: logging.Logger | None = None,
                 first_delay: float = 1.0):
        self.source = source
        self.grace_s = grace_s
        self.log = log or logging.getLogger(__name__)
        self._first_delay = first_delay

    @property
    def settle_s(self) -> float:  # type: ignore[override]
        return self.source.settle_s

    def read(self, cursor: Any = None, max_lines: int = 5000) -> LogBatch:
        outage = Outage(self.grace_s, first_delay=self._first_delay)
        while True:
            try:
                batch = self.source.read(cursor, max_lines)
            except LogSourceUnavailable as exc:
                delay = outage.failed()
                if outage.exhausted:
                    raise LogSourceUnavailable(f"log store unavailable for {outage.elapsed:.0f} s, longer "
                                               f"than the {self.grace_s:g} s grace period: {exc}") from exc
                self.log.warning("Log store unavailable (%s); retrying in %.1f s, giving up after %g s",
                                 exc, delay, self.grace_s)
                time.sleep(delay)
                continue
            if (lasted := outage.recovered()) is not None:
                self.log.warning("Log store reachable again after %.1f s; continuing from the saved cursor",
                                 lasted)
            return batch
