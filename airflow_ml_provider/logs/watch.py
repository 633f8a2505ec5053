"""Watching a job's log: every new line through the rules and the metrics tracker, from a cursor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_ml_provider.logs.metrics import MetricsTracker
from airflow_ml_provider.logs.rules import LogRules, RuleMatch
from airflow_ml_provider.logs.source import LogLine, LogSource


@dataclass(frozen=True)
class WatchStep:
    lines: list[LogLine]  # the new lines, up to and including the one that matched a rule
    match: RuleMatch | None


class LogWatch:
    """Reads one batch per ``step()``: each line is fed to the metrics tracker, then to the rules.

    The cursor and the tracker's state are JSON-serializable, so a watch rebuilt from them continues
    exactly after the last line it returned, with the same series. A verdict ends the watch: lines of
    the batch after the matching one are not returned.
    """

    def __init__(self, source: LogSource, rules: LogRules, tracker: MetricsTracker | None = None,
                 cursor: Any = None):
        self.source = source
        self.rules = rules
        self.tracker = tracker or MetricsTracker()
        self.cursor = cursor

    def step(self, max_lines: int = 5000) -> WatchStep:
        """One read; raises LogSourceUnavailable (cursor unchanged) when the store cannot be read."""
        batch = self.source.read(self.cursor, max_lines)
        self.cursor = batch.cursor
        for index, line in enumerate(batch.lines):
            self.tracker.feed(line, self.rules)
            if (match := self.rules.check(line)) is not None:
                return WatchStep(batch.lines[: index + 1], match)
        return WatchStep(batch.lines, None)
