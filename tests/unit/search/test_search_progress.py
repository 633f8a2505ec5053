"""A trial's objective read from its log: structured metric lines by default, a regex on request."""

from __future__ import annotations

import json

from airflow_ml_provider.jobs.search.progress import ObjectiveTracker
from airflow_ml_provider.logs.source import LogLine


def _event(source: str, **fields) -> LogLine:
    return LogLine(source, json.dumps(fields))


def test_structured_lines_give_the_objective_per_step_and_the_final_result():
    tracker = ObjectiveTracker("auc")
    for line in [
        LogLine("rank 0", "[LightGBM] [Info] training"),
        _event("rank 0", event="metrics", step=1, loss=0.6, auc=0.71),
        _event("rank 1", event="metrics", step=1, loss=0.1, auc=0.99),  # not the reporting rank
        _event("rank 0", event="metrics", step=2, loss=0.5),  # no auc at this step
        _event("rank 0", event="metrics", step=3, loss=0.4, auc=float("nan")),
        _event("rank 0", event="metrics", step=4, loss=0.3, auc=0.83),
        _event("rank 0", event="model_saved", path="/m/model.txt"),
    ]:
        tracker.feed(line)
    assert tracker.intermediate == {1: 0.71, 4: 0.83}
    assert tracker.final == 0.83  # the last step, until a result arrives
    tracker.feed(_event("rank 0", event="result", auc=0.85))
    assert (tracker.final, tracker.model_path) == (0.85, "/m/model.txt")


def test_metric_regexes_read_the_objective_from_plain_lines_of_one_worker():
    stepped = ObjectiveTracker("acc", [r"epoch (?P<step>\d+): .*val_acc=(?P<acc>[0-9.]+)"])
    counted = ObjectiveTracker("acc", [r"loss=(?P<loss>[0-9.]+)", r"val_acc=(?P<acc>[0-9.]+)"])
    lines = [LogLine("rank 0", "epoch 1: loss=0.9 val_acc=0.61"), LogLine("rank 0", "noise val_acc=oops"),
             LogLine("rank 1", "epoch 1: loss=0.9 val_acc=0.99"), LogLine("rank 0", "epoch 2: loss=0.7 val_acc=0.72")]
    for line in lines:
        stepped.feed(line)
        counted.feed(line)
    assert stepped.intermediate == {1: 0.61, 2: 0.72} and stepped.final == 0.72
    assert counted.intermediate == {1: 0.61, 2: 0.72} and counted.final == 0.72
    assert ObjectiveTracker("acc", [r"val_acc=(?P<acc>[0-9.]+)"]).final is None


def test_a_structured_result_wins_over_a_matched_line():
    tracker = ObjectiveTracker("auc", [r"auc=(?P<auc>[0-9.]+)"])
    tracker.feed(LogLine("rank 0", "step done auc=0.7"))
    tracker.feed(_event("rank 0", event="result", auc=0.8))
    assert tracker.final == 0.8 and tracker.intermediate == {1: 0.7}
