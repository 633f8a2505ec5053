"""A trial's objective as its job reports it: the value at each step (for pruning) and the final value."""

from __future__ import annotations

import math

from airflow_ml_provider.logs.metrics import MetricsCollector, parse_event
from airflow_ml_provider.logs.rules import LogRules
from airflow_ml_provider.logs.source import LogLine


class ObjectiveTracker:
    """Fed a trial job's log lines in order. The objective comes from the structured metric lines
    (``{"event": "metrics", "step": 3, "auc": 0.91}``, then the final ``result``) and, with
    ``patterns``, from plain lines too: metric regexes as in :class:`LogRules`, whose named groups are
    metrics (``val_auc=(?P<auc>[0-9.]+)``) and whose ``step`` group numbers the step; a match without
    one counts as the next step. Like the structured lines, matches are taken from one worker only
    (the first that reports the objective).
    """

    def __init__(self, metric: str, patterns: list[str] | None = None):
        self.metric = metric
        self.rules = LogRules(metrics=patterns) if patterns else None
        self.collector = MetricsCollector()
        self.intermediate: dict[int, float] = {}
        self._matched: float | None = None
        self._matched_source: str | None = None

    def feed(self, line: LogLine) -> None:
        before = len(self.collector.history)
        self.collector.feed(line)
        for entry in self.collector.history[before:]:
            value = _number(entry.get(self.metric))
            if value is not None and isinstance(entry.get("step"), int):
                self.intermediate[entry["step"]] = value
        if self.rules is None or parse_event(line.text) is not None:
            return
        values, step = self.rules.metrics_in(line.text)
        if self.metric not in values or (self._matched_source or line.source) != line.source:
            return
        self._matched_source = line.source
        self.intermediate[len(self.intermediate) + 1 if step is None else step] = values[self.metric]
        self._matched = values[self.metric]

    @property
    def final(self) -> float | None:
        """The objective's final value: the job's result, else its last reported step."""
        structured = _number(self.collector.final.get(self.metric))
        return structured if structured is not None else self._matched

    @property
    def model_path(self) -> str | None:
        return self.collector.model_path


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
