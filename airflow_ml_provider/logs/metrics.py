"""Metrics from log lines: the structured JSON lines the runtime prints (see runtime.metrics_log) and the
user's metric regexes. One tracker, one rule for which direction of a metric is better."""

from __future__ import annotations

import copy
import json
import math
import re
from typing import Any

from airflow_ml_provider.logs.rules import LogRules
from airflow_ml_provider.logs.source import LogLine
from airflow_ml_provider.runtime.metrics_log import EVENT_KEY

# Names whose smaller values are better; every other metric is maximized unless a goal says otherwise.
_LOWER_IS_BETTER = re.compile(r"loss|error|mse|mae|mape|rmse|perplexity|logloss|^(l1|l2|wer|cer)$",
                              re.IGNORECASE)


def metric_goal(name: str, goals: dict[str, str] | None = None) -> str:
    """``"min"`` or ``"max"``: the one place that decides which direction of a metric is better."""
    return (goals or {}).get(name) or ("min" if _LOWER_IS_BETTER.search(name) else "max")


def parse_event(text: str) -> dict[str, Any] | None:
    """The JSON object of a structured line (``{"event": ...}``), or None for an ordinary line."""
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get(EVENT_KEY), str) else None


class MetricsTracker:
    """Last value, best value and series of every metric, the final ``result``, the saved model and the
    last checkpoint, from the runtime's JSON lines and metric regexes (LogRules), in a JSON-serializable
    state so a resumed reader continues the same series.

    Each metric follows the first source that reports it (the reporting rank, or a launcher relaying
    every rank), so N workers printing the same loss do not interleave; ``result``/``model_saved``/
    ``checkpoint`` events likewise follow the first source that reports any of them. A series keeps at
    most ``max_points`` points: when full, every other point is dropped and only every other new one
    kept, which bounds memory and XCom size while keeping the whole curve's shape.
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
        state = copy.deepcopy(state or {})
        self.metrics: dict[str, dict[str, Any]] = state.get("metrics", {})
        self.result: dict[str, Any] = state.get("result", {})
        self.model_path: str | None = state.get("model_path")
        self.checkpoint: dict[str, Any] | None = state.get("checkpoint")
        self.reporter: str | None = state.get("reporter")

    def feed(self, line: LogLine, rules: LogRules | None = None) -> list[tuple[str, int, float]]:
        """Take one line; returns the metric points it added, as ``(name, step, value)``."""
        event = parse_event(line.text)
        if event is None:
            if rules is None:
                return []
            values, step = rules.metrics_in(line.text)
            return self.record(values, line.source, step)
        kind = event[EVENT_KEY]
        if kind in ("result", "model_saved", "checkpoint"):
            self.reporter = self.reporter or line.source
            if line.source != self.reporter:
                return []
            if kind == "result":
                self.result.update(_bounded_result(event))
            elif kind == "model_saved" and isinstance(event.get("path"), str):
                self.model_path = event["path"]
            elif kind == "checkpoint" and isinstance(event.get("path"), str):
                self.checkpoint = {k: event.get(k) for k in ("path", "step", "epoch") if event.get(k) is not None}
        if kind == "metrics":
            values = {k: v for k, v in event.items() if k not in (EVENT_KEY, "rank", "step", "epoch") and _finite(v)}
            step = event.get("step")
            return self.record(values, line.source, step if isinstance(step, int) else None)
        return []

    def record(self, values: dict[str, float], source: str, step: int | None = None) -> list[tuple[str, int, float]]:
        added = []
        for name, value in values.items():
            metric = self.metrics.get(name)
            if metric is None:
                metric = self.metrics[name] = {"source": source, "goal": metric_goal(name, self.goals), "count": 0,
                                               "stride": 1, "series": []}
            if metric["source"] != source:
                continue
            metric["count"] += 1
            value = float(value)
            better = min if metric["goal"] == "min" else max
            metric["best"] = better(metric.get("best", value), value)
            metric["last"] = value
            point_step = metric["count"] if step is None else step
            metric["last_step"] = point_step
            added.append((name, point_step, value))
            if (metric["count"] - 1) % metric["stride"] == 0:
                metric["series"].append([point_step, value])
                if len(metric["series"]) > self.max_points:
                    metric["series"] = metric["series"][::2]
                    metric["stride"] *= 2
        return added

    @property
    def final(self) -> dict[str, Any]:
        """The last value of every metric, overridden by the final result where both name a metric."""
        return {**{name: m["last"] for name, m in self.metrics.items()}, **self.result}

    def history(self) -> list[dict[str, float]]:
        """The series as rows, one per step: ``[{"step": 1, "loss": 0.5, "auc": 0.9}, ...]``."""
        rows: dict[int, dict[str, float]] = {}
        for name, metric in self.metrics.items():
            for step, value in metric["series"]:
                rows.setdefault(step, {"step": step})[name] = value
        return [rows[step] for step in sorted(rows)]

    def summary(self) -> dict[str, dict[str, Any]]:
        """``{"last": {name: value}, "best": {name: value}, "series": {name: [[step, value], ...]}}``."""
        return {
            "last": {name: m["last"] for name, m in self.metrics.items()},
            "best": {name: m["best"] for name, m in self.metrics.items()},
            "series": {name: [list(point) for point in m["series"]] for name, m in self.metrics.items()},
        }

    def state(self) -> dict[str, Any]:
        """What to pass back as ``state`` to continue these series."""
        return copy.deepcopy({"metrics": self.metrics, "result": self.result, "model_path": self.model_path,
                              "checkpoint": self.checkpoint, "reporter": self.reporter})


_RESULT_KEYS, _RESULT_VALUE = 64, 1024


def _bounded_result(event: dict[str, Any]) -> dict[str, Any]:
    """What of a pod's ``result`` line may reach XCom: at most 64 values, each finite JSON of at most
    1 KiB (numbers, a content hash, a short list); NaN and larger values are dropped (a pod's output
    is not trusted)."""
    kept = {key: value for key, value in event.items()
            if key not in (EVENT_KEY, "rank") and len(key) <= 256 and _small_json(value)}
    return dict(list(kept.items())[:_RESULT_KEYS])


def _small_json(value: Any) -> bool:
    try:
        return len(json.dumps(value, allow_nan=False)) <= _RESULT_VALUE
    except (TypeError, ValueError):
        return False


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
