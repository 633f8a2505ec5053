"""Metrics from log lines: the structured JSON lines the runtime prints (see runtime.metrics_log) and,
for MetricsTracker, the user's metric regexes."""

from __future__ import annotations

import copy
import json
import math
import re
from typing import Any

from airflow_ml_provider.logs.rules import LogRules
from airflow_ml_provider.logs.source import LogLine
from airflow_ml_provider.runtime.metrics_log import EVENT_KEY


def parse_event(text: str) -> dict[str, Any] | None:
    """The JSON object of a structured line (``{"event": ...}``), or None for an ordinary line."""
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get(EVENT_KEY), str) else None


class MetricsCollector:
    """Follows one reporting worker (the first source that reports metrics, normally rank 0):
    its per-step metric series, its final ``result`` and where it saved the model."""

    def __init__(self) -> None:
        self.reporter: str | None = None
        self.history: list[dict[str, Any]] = []
        self.result: dict[str, Any] = {}
        self.model_path: str | None = None

    def feed(self, line: LogLine) -> None:
        event = parse_event(line.text)
        if event is None or event[EVENT_KEY] not in ("metrics", "result", "model_saved"):
            return
        self.reporter = self.reporter or line.source
        if line.source != self.reporter:
            return
        fields = {key: value for key, value in event.items() if key not in (EVENT_KEY, "rank")}
        if event[EVENT_KEY] == "metrics":
            self.history.append(fields)
        elif event[EVENT_KEY] == "result":
            self.result.update(fields)
        else:
            self.model_path = fields.get("path")

    @property
    def final(self) -> dict[str, Any]:
        """The last step's metrics, overridden by the final result where both name a metric."""
        return {**(self.history[-1] if self.history else {}), **self.result}


# Names whose smaller values are better; every other metric is maximized unless goals say otherwise.
_LOWER_IS_BETTER = re.compile(r"loss|error|mse|mae|mape|perplexity|^(l1|l2|wer|cer)$", re.IGNORECASE)
_EVENTS_WITH_METRICS = ("metrics", "result")


class MetricsTracker:
    """Last value, best value and series of every metric, from metric regexes (LogRules) and the
    runtime's JSON lines, in a JSON-serializable state so a resumed reader continues the same series.

    Each metric follows the first source that reports it (the reporting rank, or a launcher relaying
    every rank), so N workers printing the same loss do not interleave. A series keeps at most
    ``max_points`` points: when full, every other point is dropped and only every other new one kept,
    which bounds memory and XCom size while keeping the whole curve's shape.
    """

    def __init__(self, goals: dict[str, str] | None = None, max_points: int = 500,
                 state: dict[str, Any] | None = None):
        for name, goal in (goals or {}).items():
            if goal not in ("min", "max"):
                raise ValueError(f"metric_goals[{name!r}]: expected 'min' or 'max', got {goal!r}")
        if max_points < 2:
            raise ValueError(f"max_points: keep at least 2 points per series, got {max_points}")
        self.goals = dict(goals or {})
        self.max_points = max_points
        self.metrics: dict[str, dict[str, Any]] = copy.deepcopy(state or {})

    def feed(self, line: LogLine, rules: LogRules | None = None) -> None:
        event = parse_event(line.text)
        if event is not None:
            if event[EVENT_KEY] in _EVENTS_WITH_METRICS:
                values = {k: v for k, v in event.items()
                          if k not in (EVENT_KEY, "rank", "step") and _finite(v)}
                step = event.get("step")
                self.record(values, line.source, step if isinstance(step, int) else None)
        elif rules is not None:
            values, step = rules.metrics_in(line.text)
            self.record(values, line.source, step)

    def record(self, values: dict[str, float], source: str, step: int | None = None) -> None:
        for name, value in values.items():
            metric = self.metrics.get(name)
            if metric is None:
                metric = self.metrics[name] = {"source": source, "goal": self.goal(name), "count": 0,
                                               "stride": 1, "series": []}
            if metric["source"] != source:
                continue
            metric["count"] += 1
            value = float(value)
            better = min if metric["goal"] == "min" else max
            metric["best"] = better(metric.get("best", value), value)
            metric["last"] = value
            if (metric["count"] - 1) % metric["stride"] == 0:
                metric["series"].append([metric["count"] if step is None else step, value])
                if len(metric["series"]) > self.max_points:
                    metric["series"] = metric["series"][::2]
                    metric["stride"] *= 2

    def goal(self, name: str) -> str:
        return self.goals.get(name) or ("min" if _LOWER_IS_BETTER.search(name) else "max")

    def summary(self) -> dict[str, dict[str, Any]]:
        """``{"last": {name: value}, "best": {name: value}, "series": {name: [[step, value], ...]}}``."""
        return {
            "last": {name: m["last"] for name, m in self.metrics.items()},
            "best": {name: m["best"] for name, m in self.metrics.items()},
            "series": {name: [list(point) for point in m["series"]] for name, m in self.metrics.items()},
        }

    def state(self) -> dict[str, Any]:
        """What to pass back as ``state`` to continue these series."""
        return copy.deepcopy(self.metrics)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
