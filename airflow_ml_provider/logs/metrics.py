"""Metrics from log lines: the structured JSON lines the runtime prints (see runtime.metrics_log) and the
user's metric regexes. One tracker, one rule for which direction of a metric is better.

A pod's output is not trusted, so everything a line claims is bounded and typed here, before it reaches
XCom, the follower's saved state, MLflow, Optuna or StatsD (the numbers are the module's constants):
a JSON line of at most ``MAX_EVENT_CHARS`` characters and ``MAX_DEPTH`` levels of nesting; a step
``0 <= step < 2**63``; metric names matching ``METRIC_NAME`` (at most ``MAX_NAME_CHARS`` characters),
at most ``MAX_METRICS`` of them per job; at most ``MAX_POINTS`` series points over all metrics. What
breaks a bound is ignored with a warning (the first ``WARNINGS_PER_KIND`` of each kind, then one saying
that more are ignored silently), never raised.
"""

from __future__ import annotations

import copy
import json
import math
import posixpath
import re
from collections.abc import Callable, Sequence
from itertools import compress, repeat
from operator import itemgetter
from typing import Any

from airflow_ml_provider.logs.rules import LogRules
from airflow_ml_provider.logs.source import LogLine
from airflow_ml_provider.runtime.metrics_log import EVENT_KEY

MAX_EVENT_CHARS = 256 * 1024  # a JSON line longer than this is not parsed
MAX_DEPTH = 8  # nesting levels of a JSON line (an event with a short list value has 2)
MAX_STEP = 2**63  # steps are 0 <= step < MAX_STEP (what Optuna, MLflow and SQL integers take)
MAX_NAME_CHARS = 128
METRIC_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/]{0,127}")  # and a normal path: see _name_ok
MAX_METRICS = 256  # distinct metric names per job
MAX_POINTS = 8000  # series points kept over all metrics (each series at most max_points as well)
MAX_PATH_CHARS = 4096  # a model or checkpoint path
WARNINGS_PER_KIND = 5
# A local job's launcher samples its workers' CPU and memory (jobs.backends.local.resources); only its own lines
# count (a worker's line is the worker's source, whatever it prints), at most this many ranks plus "launcher".
# Per-rank curves: a metric's points from the sources it does not follow (the other ranks), from structured lines
# only, each series at most OTHER_POINTS points (thinned as the followed one), at most OTHER_SERIES of them in all.
OTHER_POINTS, OTHER_SERIES = 50, 32
# A cluster's workers come from its metrics API instead (jobs.backends.kubernetes.pod_metrics), named by role and index.
RESOURCES_SOURCE = "launcher"
MAX_RESOURCE_ENTRIES = 1025
_RESOURCE_WORKER = re.compile(r"\d{1,6}|[a-z][a-z0-9-]{0,30}(?: \d{1,6})?")
_RESOURCE_USE = ("cpu", "mem_mib")  # every worker's; then what some samplers add (processes, pods, GPU)
_RESOURCE_EXTRA = ("procs", "pods", "gpu", "gpu_mem_mib")
MAX_NOTE_CHARS = 300

# Names whose smaller values are better; every other metric is maximized unless a goal says otherwise.
_LOWER_IS_BETTER = re.compile(r"loss|error|mse|mae|mape|rmse|perplexity|logloss|^(l1|l2|wer|cer)$",
                              re.IGNORECASE)
_POSITION_KEYS = (EVENT_KEY, "rank", "step", "epoch")


def metric_goal(name: str, goals: dict[str, str] | None = None) -> str:
    """``"min"`` or ``"max"``: the one place that decides which direction of a metric is better."""
    return (goals or {}).get(name) or ("min" if _LOWER_IS_BETTER.search(name) else "max")


def parse_event(text: str) -> dict[str, Any] | None:
    """The JSON object of a structured line (``{"event": ...}``), or None for an ordinary line and for
    one past the size and depth bounds (never raises, whatever the line)."""
    return _decode(text)[0]


def _decode(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """``(event, None)``, ``(None, None)`` for an ordinary line, or ``(None, why)`` for a structured
    line that breaks a bound."""
    if not text.startswith("{"):
        return None, None
    if len(text) > MAX_EVENT_CHARS:
        return None, f"a JSON line of {len(text)} characters, over {MAX_EVENT_CHARS}" if _names_event(text) else None
    try:
        data = json.loads(text)
    except RecursionError:
        return None, f"a JSON line nested deeper than {MAX_DEPTH} levels"
    except ValueError:
        return None, None
    if not (isinstance(data, dict) and isinstance(data.get(EVENT_KEY), str)):
        return None, None
    if _depth(data) > MAX_DEPTH:
        return None, f"a JSON line nested deeper than {MAX_DEPTH} levels"
    return data, None


def _names_event(text: str) -> bool:
    return f'"{EVENT_KEY}"' in text


def _depth(value: Any) -> int:
    """Nesting levels of parsed JSON, without recursion (json.loads accepts about 1,000)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:  # deeper already fails the bound: no need to walk further
                stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def metric_position(event: dict) -> Any:
    """Where a ``metrics`` event's point lies: its ``step`` (LightGBM's round), else its ``epoch`` (what the
    epoch-based Horovod and PyTorch trainers log)."""
    return event.get("step", event.get("epoch"))


def valid_step(step: Any) -> bool:
    """Whether ``step`` may number a metric point: an integer, ``0 <= step < 2**63``."""
    return isinstance(step, int) and not isinstance(step, bool) and 0 <= step < MAX_STEP


def _name_ok(name: Any) -> bool:
    """A name every store takes: the pattern, and a normal path (no ``//``, ``/./``, ``..`` segments or
    trailing ``/``: MLflow treats names as file paths)."""
    return isinstance(name, str) and METRIC_NAME.fullmatch(name) is not None and posixpath.normpath(name) == name


class MetricsTracker:
    """Last value, best value and series of every metric, the final ``result``, the saved model and the
    last checkpoint, from the runtime's JSON lines and metric regexes (LogRules), in a JSON-serializable
    state so a resumed reader continues the same series.

    Each metric follows the first source that reports it (the reporting rank, or a launcher relaying
    every rank), so N workers printing the same loss do not interleave (the other sources' points of a
    structured line are kept apart, as their own bounded curves: ``others``); ``result``/``model_saved``/
    ``checkpoint`` events likewise follow the first source that reports any of them. A series keeps at
    most ``max_points`` points, and all series together at most ``MAX_POINTS``: when a series is full,
    every other point is dropped and only every other new one kept, which bounds memory, the saved
    state and XCom while keeping the whole curve's shape. What a line breaks of the module's bounds is
    ignored, with a warning in ``warnings`` (the caller drains it).
    """

    def __init__(self, goals: dict[str, str] | None = None, max_points: int = 500,
                 state: dict[str, Any] | None = None, confine: Callable[[str], str | None] | None = None,
                 refused: str = ""):
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
        self.resources: dict[str, Any] | None = state.get("resources")  # the local launcher's last sample
        self.others: dict[str, dict[str, dict[str, Any]]] = state.get("others", {})  # name -> source -> series
        self.ignored: dict[str, int] = state.get("ignored", {})  # kind of bound -> lines ignored for it
        self.warnings: list[str] = []
        # A reported model or checkpoint path is kept as ``confine`` resolves it, or ignored (a warning
        # ending in ``refused``) where it answers None; None: every path (of a valid type) is kept.
        self.confine, self.refused = confine, refused

    def feed(self, line: LogLine, rules: LogRules | None = None) -> list[tuple[str, int, float]]:
        """Take one line; returns the metric points it added, as ``(name, step, value)``."""
        return self.feed_lines((line,), rules)

    def feed_lines(self, lines: Sequence[LogLine], rules: LogRules | None = None) -> list[tuple[str, int, float]]:
        """Take lines in order; returns the metric points they added. Every line read passes through this
        loop: an ordinary one (most lines) costs one search per metric regex and no more."""
        points: list[tuple[str, int, float]] = []
        metrics_in = None
        if rules is not None and rules.metrics_may_match(lines):
            metrics_in, lines = rules.metrics_in, self._without_other_reporters(lines, rules)
        record = self._record
        for line in lines:
            text = line.text
            if text.startswith("{"):
                event, problem = _decode(text)
                if problem is not None:
                    self._ignore("line", line, problem)
                    continue
                if event is not None:
                    self._event(event, line, points)
                    continue
            if metrics_in is not None:
                values, step = metrics_in(text)
                if values or step is not None:
                    record(values, line.source, step, line, points)
        return points

    def _without_other_reporters(self, lines: Sequence[LogLine], rules: LogRules) -> Sequence[LogLine]:
        """``lines`` less those nothing can be taken from: every metric the rules extract is already followed
        from another worker (one source per metric), and the line is no structured event. Distributed jobs
        print their metrics on every rank, and only the first reporter's are kept: the other ranks' lines are
        not searched at all (a bad step one of them names is not reported either). C loops only."""
        owners = set()
        for name in rules.metric_names:
            if (metric := self.metrics.get(name)) is None:
                return lines  # a line may still start following it
            owners.add(metric["source"])
        sources = list(map(itemgetter(0), lines))
        if owners.issuperset(sources) or any(map(str.startswith, map(itemgetter(1), lines), repeat("{"))):
            return lines
        return list(compress(lines, map(owners.__contains__, sources)))

    def _event(self, event: dict[str, Any], line: LogLine, points: list[tuple[str, int, float]]) -> None:
        """Take one structured line's event; append the metric points it adds to ``points``."""
        kind = event[EVENT_KEY]
        if kind in ("result", "model_saved", "checkpoint"):
            self.reporter = self.reporter or line.source
            if line.source != self.reporter:
                return
            if kind == "result":
                self.result.update(self._bounded_result(event, line))
            elif kind == "model_saved" and (path := self._reported_path("model path", event.get("path"), line)):
                self.model_path = path
            elif kind == "checkpoint" and (path := self._reported_path("checkpoint", event.get("path"), line)):
                self.checkpoint = {"path": path, **{k: event[k] for k in ("step", "epoch") if valid_step(event.get(k))}}
        if kind == "resources" and line.source == RESOURCES_SOURCE:
            if not self.keep_resources(event.get("workers"), event.get("at")):
                self._ignore("resources", line, f"a resources sample is not at most {MAX_RESOURCE_ENTRIES} ranks "
                                                "of finite cpu and mem_mib (and procs, gpu, gpu_mem_mib)")
        if kind == "metrics":
            step = metric_position(event)
            if step is not None and not valid_step(step):
                self._ignore("step", line, f"step {_short(step)} is not an integer 0 <= step < 2**63")
                return
            values = {k: v for k, v in event.items() if k not in _POSITION_KEYS and _finite(v)}
            self._record(values, line.source, step, line, points, per_rank=True)

    def keep_resources(self, workers: Any, at: Any, source: str | None = None, note: str | None = None) -> bool:
        """Keep a sample of the workers' use (the launcher's line, or the backend's read: ``source`` says where
        from) as the last one, if it keeps the bounds; ``note``: why there is none (said in the view)."""
        if (kept := _bounded_resources(workers)) is None:
            return False
        self.resources = {"at": at if _finite(at) else None, "workers": kept,
                          **({"source": source} if source else {}), **({"note": note[:MAX_NOTE_CHARS]} if note else {})}
        return True

    def record(self, values: dict[str, float], source: str, step: int | None = None,
               line: LogLine | None = None) -> list[tuple[str, int, float]]:
        """Take metric values reported by ``source`` (numbered ``step``, else by their count); returns the
        points added, as ``(name, step, value)``."""
        added: list[tuple[str, int, float]] = []
        self._record(values, source, step, line or LogLine(source, ""), added)
        return added

    def _record(self, values: dict[str, float], source: str, step: int | None, line: LogLine,
                added: list[tuple[str, int, float]], per_rank: bool = False) -> None:
        """``record``, appending the points to ``added`` (the batch's list: none made per line); ``per_rank``: a
        structured line, whose values from a source a metric does not follow are kept as that source's curve."""
        if step is not None and not valid_step(step):
            self._ignore("step", line, f"step {_short(step)} is not an integer 0 <= step < 2**63")
            return
        for name, value in values.items():
            metric = self.metrics.get(name)
            if metric is None:
                if not _name_ok(name):
                    self._ignore("name", line, f"metric name {_short(name)} does not match {METRIC_NAME.pattern} "
                                               "as a normal path")
                    continue
                if len(self.metrics) >= MAX_METRICS:
                    self._ignore("names", line, f"metric {_short(name)} is past the {MAX_METRICS} distinct metric "
                                                "names a job may report", limit=1)
                    continue
                metric = self.metrics[name] = {"source": source, "goal": metric_goal(name, self.goals), "count": 0,
                                               "stride": 1, "series": []}
                for other in self.metrics.values():  # every series within its share of MAX_POINTS
                    self._thin(other)
            if metric["source"] != source:
                if per_rank:
                    self._other(name, source, step, float(value))
                continue
            count = metric["count"] = metric["count"] + 1
            value = float(value)
            best = metric.get("best")
            if best is None or (value < best if metric["goal"] == "min" else value > best):
                metric["best"] = value
            metric["last"] = value
            point_step = count if step is None else step
            metric["last_step"] = point_step
            added.append((name, point_step, value))
            if (count - 1) % metric["stride"] == 0:
                metric["series"].append([point_step, value])
                self._thin(metric)

    def _other(self, name: str, source: str, step: int | None, value: float) -> None:
        """A point of ``name`` from a source it does not follow, on that source's own bounded curve."""
        key = source[:64]
        series = self.others.get(name, {}).get(key)
        if series is None:
            if sum(map(len, self.others.values())) >= OTHER_SERIES:
                return
            series = self.others.setdefault(name, {})[key] = {"count": 0, "stride": 1, "series": []}
        count = series["count"] = series["count"] + 1
        if (count - 1) % series["stride"] == 0:
            series["series"].append([count if step is None else step, value])
            while len(series["series"]) > OTHER_POINTS:
                series["series"] = series["series"][::2]
                series["stride"] *= 2

    def _thin(self, metric: dict[str, Any]) -> None:
        """Halve a series (and the share of new points it keeps) while it is over its cap: ``max_points``,
        or its share of ``MAX_POINTS`` among all metrics (256 metrics keep 16 to 31 points each)."""
        cap = max(2, min(self.max_points, MAX_POINTS // len(self.metrics)))
        while len(metric["series"]) > cap:
            metric["series"] = metric["series"][::2]
            metric["stride"] *= 2

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
                              "checkpoint": self.checkpoint, "reporter": self.reporter, "ignored": self.ignored,
                              "resources": self.resources, "others": self.others})

    # -- bounds -----------------------------------------------------------------------------------------

    def _ignore(self, kind: str, line: LogLine, why: str, limit: int = WARNINGS_PER_KIND) -> None:
        """Count a line (or value) ignored for ``kind``; warn for the first ``limit`` of each kind."""
        count = self.ignored[kind] = self.ignored.get(kind, 0) + 1
        if count <= limit:
            more = "; further ones of this kind are ignored without a warning" if count == limit else ""
            self.warnings.append(f"ignored part of a log line of [{line.source[:64]}]: {why}{more}")

    def _reported_path(self, what: str, path: Any, line: LogLine) -> str | None:
        """``path`` as kept (see ``confine``), or None where it is not a bounded string or not confined."""
        if not (isinstance(path, str) and 0 < len(path) <= MAX_PATH_CHARS and "\x00" not in path):
            self._ignore("path", line, f"path {_short(path)} is not a string of 1 to {MAX_PATH_CHARS} characters")
            return None
        if self.confine is None:
            return path
        if (resolved := self.confine(path)) is None:
            self.warnings.append(f"ignored {what} {path!r} reported by [{line.source}]: {self.refused}")
        return resolved

    def _bounded_result(self, event: dict[str, Any], line: LogLine) -> dict[str, Any]:
        """What of a pod's ``result`` line may reach XCom: at most 64 values named like metrics, each
        finite JSON of at most 1 KiB (numbers, a content hash, a short list); NaN and larger values are
        dropped (a pod's output is not trusted)."""
        kept = {}
        for key, value in event.items():
            if key in (EVENT_KEY, "rank"):
                continue
            if not _name_ok(key):
                self._ignore("name", line, f"result name {_short(key)} does not match {METRIC_NAME.pattern}")
            elif _small_json(value):
                kept[key] = value
        return dict(list(kept.items())[:_RESULT_KEYS])


_RESULT_KEYS, _RESULT_VALUE = 64, 1024


def _small_json(value: Any) -> bool:
    try:
        return len(json.dumps(value, allow_nan=False)) <= _RESULT_VALUE
    except (TypeError, ValueError):
        return False


def _bounded_resources(workers: Any) -> dict[str, dict[str, float]] | None:
    """A resources sample's ``workers`` as kept (see jobs.backends.local.resources), or None if it breaks a bound."""
    if not isinstance(workers, dict) or len(workers) > MAX_RESOURCE_ENTRIES:
        return None
    kept = {}
    for rank, use in workers.items():
        if not (isinstance(rank, str) and _RESOURCE_WORKER.fullmatch(rank) and isinstance(use, dict)):
            return None
        values = {key: use.get(key) for key in (*_RESOURCE_USE, *(key for key in _RESOURCE_EXTRA if key in use))}
        if not all(_finite(value) and value >= 0 for value in values.values()):
            return None
        kept[rank] = values
    return kept


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _short(value: Any, chars: int = 64) -> str:
    """``repr(value)`` cut to about ``chars`` characters, for a warning about a pod's output."""
    text = repr(value)
    return text if len(text) <= chars else f"{text[:chars]}...({len(text)} chars)"
