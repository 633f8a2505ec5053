"""Outage backoff and grace period, and RetryingLogSource riding out a flaky log source."""

from __future__ import annotations

import logging

import pytest

from airflow_ml_provider.logs.outage import Outage, RetryingLogSource
from airflow_ml_provider.logs.source import LogBatch, LogLine, LogSource, LogSourceUnavailable


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FlakySource(LogSource):
    """Lines ``line 0..n-1``; the reads listed in ``failing`` (0-based call numbers) fail."""

    settle_s = 3.0

    def __init__(self, n: int, failing: set[int]):
        self.n, self.failing, self.calls = n, failing, 0

    def read(self, cursor=None, max_lines=5000):
        call, self.calls = self.calls, self.calls + 1
        if call in self.failing:
            raise LogSourceUnavailable(f"read {call} failed")
        start = cursor or 0
        end = min(self.n, start + max_lines)
        return LogBatch([LogLine("pod", f"line {i}") for i in range(start, end)], end)


def test_backoff_doubles_up_to_the_cap_and_the_grace_period_bounds_it():
    clock = Clock()
    outage = Outage(grace_s=10, first_delay=1, max_delay=4, clock=clock)
    delays = []
    while not outage.exhausted:
        delays.append(outage.failed())
        clock.sleep(delays[-1])
    assert delays == [1, 2, 4, 4]
    assert outage.recovered() == 11 and outage.recovered() is None
    assert outage.failed() == 1  # a new outage starts over
    with pytest.raises(ValueError, match="outage_grace_period"):
        Outage(grace_s=-1)


def test_retrying_source_rides_out_a_short_outage(caplog):
    source = RetryingLogSource(FlakySource(10, failing={1, 2, 3}), grace_s=30, first_delay=0.01)
    first = source.read(None, max_lines=4)
    with caplog.at_level(logging.WARNING):
        second = source.read(first.cursor, max_lines=4)
    assert [line.text for line in first.lines + second.lines] == [f"line {i}" for i in range(8)]
    assert sum("Log store unavailable" in r.message for r in caplog.records) == 3
    assert any("reachable again" in r.message for r in caplog.records)
    assert source.settle_s == 3.0


def test_retrying_source_gives_up_after_the_grace_period():
    source = RetryingLogSource(FlakySource(10, failing=set(range(1000))), grace_s=0.2, first_delay=0.05)
    with pytest.raises(LogSourceUnavailable, match="longer than the 0.2 s grace period"):
        source.read(None)
