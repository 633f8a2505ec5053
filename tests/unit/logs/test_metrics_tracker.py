"""MetricsTracker: last/best/series from regexes and runtime JSON lines, one source per metric,
bounded series, and a state that continues the same series after a resume."""

from __future__ import annotations

import json

import pytest

from airflow_ml_provider.logs.metrics import MetricsTracker
from airflow_ml_provider.logs.rules import LogRules
from airflow_ml_provider.logs.source import LogLine
from airflow_ml_provider.runtime.metrics_log import EVENT_KEY

RULES = LogRules(metrics=[r"loss=(?P<loss>[0-9.]+)", r"auc=(?P<auc>[0-9.]+)"])


def event(**fields) -> str:
    return json.dumps({EVENT_KEY: "metrics", **fields})


def test_regex_and_json_lines_give_last_best_and_series():
    tracker = MetricsTracker()
    for source, text in [("rank 0", event(step=1, loss=0.9, accuracy=0.5)),
                         ("rank 1", event(step=1, loss=5.0, accuracy=0.1)),  # another rank: not followed
                         ("rank 0", event(step=2, loss=0.4, accuracy=0.8)),
                         ("rank 0", event(step=3, loss=0.6, accuracy=0.7)),
                         ("rank 0", json.dumps({EVENT_KEY: "result", "accuracy": 0.75})),
                         ("eval", "auc=0.81"), ("eval", "auc=0.86 loss=7"), ("eval", "not a metric")]:
        tracker.feed(LogLine(source, text), RULES)
    summary = tracker.summary()
    assert summary["last"] == {"loss": 0.6, "accuracy": 0.7, "auc": 0.86}
    assert summary["best"] == {"loss": 0.4, "accuracy": 0.8, "auc": 0.86}  # loss minimized, others maximized
    assert summary["series"] == {"loss": [[1, 0.9], [2, 0.4], [3, 0.6]],
                                 "accuracy": [[1, 0.5], [2, 0.8], [3, 0.7]],
                                 "auc": [[1, 0.81], [2, 0.86]]}
    assert tracker.final["accuracy"] == 0.75  # the final result overrides the last step, but is no step


def test_goals_override_the_default_direction():
    tracker = MetricsTracker(goals={"loss": "max"})
    tracker.record({"loss": 1.0}, "pod")
    tracker.record({"loss": 2.0}, "pod")
    assert tracker.summary()["best"] == {"loss": 2.0}
    with pytest.raises(ValueError, match=r"metric_goals\['auc'\]: expected 'min' or 'max'"):
        MetricsTracker(goals={"auc": "up"})


def test_a_long_series_is_thinned_evenly_within_bounds():
    tracker = MetricsTracker(max_points=100)
    for step in range(1, 10_001):
        tracker.record({"loss": 1.0 / step}, "pod", step)
    series = tracker.summary()["series"]["loss"]
    assert 50 <= len(series) <= 100
    steps = [step for step, _ in series]
    assert steps[0] == 1 and len({b - a for a, b in zip(steps, steps[1:])}) == 1  # evenly spaced
    assert tracker.summary()["last"]["loss"] == 1.0 / 10_000 == tracker.summary()["best"]["loss"]


def test_state_continues_the_same_series():
    first = MetricsTracker()
    for step in (1, 2):
        first.feed(LogLine("pod", f"loss={step / 10}"), RULES)
    resumed = MetricsTracker(state=json.loads(json.dumps(first.state())))
    resumed.feed(LogLine("pod", "loss=0.05"), RULES)
    assert resumed.summary()["series"]["loss"] == [[1, 0.1], [2, 0.2], [3, 0.05]]
    assert first.summary()["series"]["loss"] == [[1, 0.1], [2, 0.2]]  # the state was a copy


def test_every_rank_printing_metrics_in_one_batch_gives_each_metric_its_first_reporters_points():
    """Ranks print the same metrics; batches of their interleaved lines keep each metric's first reporter
    only (rank 1 takes auc, which rank 0 never printed), and a structured line in a batch is still read."""
    tracker = MetricsTracker()
    first = [LogLine("rank 0", "loss=0.9"), LogLine("rank 1", "loss=5 auc=0.5"), LogLine("rank 2", "auc=0.1")]
    assert tracker.feed_lines(first, RULES) == [("loss", 1, 0.9), ("auc", 1, 0.5)]
    later = [LogLine(f"rank {i % 3}", f"loss={i} auc=0.{i}") for i in range(1, 7)]
    assert tracker.feed_lines(later, RULES) == [("auc", 2, 0.1), ("loss", 2, 3.0), ("auc", 3, 0.4),
                                                ("loss", 3, 6.0)]
    last = [LogLine("rank 2", "loss=0.01"), LogLine("rank 2", json.dumps({EVENT_KEY: "result", "auc": 0.7})),
            LogLine("rank 0", "loss=0.2")]
    assert tracker.feed_lines(last, RULES) == [("loss", 4, 0.2)]
    assert tracker.reporter == "rank 2" and tracker.final == {"loss": 0.2, "auc": 0.7}
    assert tracker.summary()["series"] == {"loss": [[1, 0.9], [2, 3.0], [3, 6.0], [4, 0.2]],
                                           "auc": [[1, 0.5], [2, 0.1], [3, 0.4]]}
