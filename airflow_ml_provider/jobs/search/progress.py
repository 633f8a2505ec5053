"""A trial's objective as its job reports it: the value at each step (for pruning) and the final value."""

from __future__ import annotations

import math
import re

from airflow_ml_provider.logs.metrics import MetricsCollector
from airflow_ml_provider.logs.source import LogLine


class ObjectiveTracker:
    """Fed a trial job's log lines in order. By default the objective comes from the structured metric
    lines (``{"event": "metrics", "step": 3, "auc": 0.91}``, then the final ``result``); with ``pattern``
    (a regex with a ``value`` group and optionally a ``step`` group) from matching plain lines instead,
    each match without a step counting as the next step.
    """

    def __init__(self, metric: str, pattern: str | None = None):
        self.metric = metric
        self.pattern = re.compile(pattern) if pattern else None
        self.collector = MetricsCollector()
        self.intermediate: dict[int, float] = {}
        self._matched: float | None = None

    def feed(self, line: LogLine) -> None:
        if self.pattern is None:
            before = len(self.collector.history)
            self.collector.feed(line)
            for entry in self.collector.history[before:]:
                value = _number(entry.get(self.metric))
                if value is not None and isinstance(entry.get("step"), int):
                    self.intermediate[entry["step"]] = value
            return
        self.collector.feed(line)  # still wanted for the saved model's path
        match = self.pattern.search(line.text)
        if match is None or (value := _number(match["value"])) is None:
            return
        step = match.groupdict().get("step")
        self.intermediate[int(step) if step else len(self.intermediate) + 1] = value
        self._matched = value

    @property
    def final(self) -> float | None:
        """The objective's final value: the job's result, else its last reported step."""
        if self.pattern is not None:
            return self._matched
        return _number(self.collector.final.get(self.metric))

    @property
    def model_path(self) -> str | None:
        return self.collector.model_path


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
