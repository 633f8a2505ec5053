"""Metrics from structured lines: one reporting worker, its series, final result and model path."""

from __future__ import annotations

import json

from airflow_ml_provider.logs.metrics import MetricsTracker, metric_goal, parse_event
from airflow_ml_provider.logs.source import LogLine
from airflow_ml_provider.runtime.metrics_log import EVENT_KEY


def test_tracker_follows_the_first_reporter_only():
    collector = MetricsTracker()
    for source, text in [
        ("launcher", "starting"),
        ("rank 0", '{"event": "metrics", "step": 1, "loss": 0.9}'),
        ("rank 1", '{"event": "metrics", "step": 1, "loss": 5.0}'),
        ("rank 0", "not json {"),
        ("rank 0", '{"event": "metrics", "step": 2, "loss": 0.4, "auc": 0.8}'),
        ("rank 0", '{"event": "model_saved", "path": "/m/model.txt"}'),
        ("rank 0", '{"event": "result", "auc": 0.85}'),
    ]:
        collector.feed(LogLine(source, text))
    assert collector.reporter == "rank 0"
    assert [row["loss"] for row in collector.history()] == [0.9, 0.4]
    assert collector.final == {"loss": 0.4, "auc": 0.85}
    assert collector.model_path == "/m/model.txt"


def test_parse_event_accepts_only_objects_with_an_event_name():
    assert parse_event(f'{{"{EVENT_KEY}": "metrics", "step": 1}}') == {"event": "metrics", "step": 1}
    assert parse_event('{"step": 1}') is None
    assert parse_event("[1, 2]") is None
    assert parse_event("loss=0.1") is None


def test_one_direction_rule_for_every_metric_name():
    for name in ("loss", "val_loss", "binary_logloss", "rmse", "mape", "perplexity", "error", "wer"):
        assert metric_goal(name) == "min", name
    for name in ("auc", "accuracy", "f1", "ndcg"):
        assert metric_goal(name) == "max", name
    assert metric_goal("loss", {"loss": "max"}) == "max"


def test_a_result_line_reaches_xcom_only_as_small_finite_values():
    tracker = MetricsTracker()
    hostile = {"event": "result", "auc": 0.9, "nan": float("nan"), "sha256": "ab" * 32, "big": "x" * 10_000,
               "argv": ["a", "b"], "deep": [[float("inf")]], **{f"k{i}": i for i in range(100)}}
    tracker.feed(LogLine("rank 0", json.dumps(hostile)))
    assert tracker.result["auc"] == 0.9 and tracker.result["sha256"] == "ab" * 32
    assert tracker.result["argv"] == ["a", "b"]
    assert not {"nan", "big", "deep"} & set(tracker.result) and len(tracker.result) == 64
