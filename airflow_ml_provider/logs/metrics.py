"""Metrics from the structured JSON lines the runtime prints (see runtime.metrics_log)."""

from __future__ import annotations

import json
from typing import Any

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
