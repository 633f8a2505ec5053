"""Per-rank curves: a metric follows one source, and the other sources' points of a structured line are kept as
their own bounded curves, which the view draws beside the followed one."""

from __future__ import annotations

import json

from airflow_ml_provider.logs.metrics import OTHER_POINTS, OTHER_SERIES, MetricsTracker
from airflow_ml_provider.logs.source import LogLine
from airflow_ml_provider.plugins.training_view import page


def metrics(source: str, step: int, **values) -> LogLine:
    return LogLine(source, json.dumps({"event": "metrics", "step": step, **values}))


def test_the_other_ranks_points_are_their_own_curves_and_never_the_followed_one():
    tracker = MetricsTracker()
    tracker.feed_lines([metrics(f"rank {rank}", step, loss=rank + 1 / step) for step in (1, 2, 3) for rank in (0, 1)])
    state = tracker.state()
    assert state["metrics"]["loss"]["series"] == [[1, 1.0], [2, 0.5], [3, 1 / 3]], "rank 0's alone"
    assert state["others"]["loss"]["rank 1"]["series"] == [[1, 2.0], [2, 1.5], [3, 1 + 1 / 3]]
    assert MetricsTracker(state=state).state()["others"] == state["others"], "kept across a resumed follower"


def test_a_rank_curve_is_thinned_and_their_number_bounded():
    tracker = MetricsTracker()
    tracker.feed_lines([metrics("rank 1", step, loss=1.0) for step in range(1, 1001)])
    tracker.feed_lines([metrics("rank 0", step, loss=1.0) for step in range(1, 1001)])  # rank 1 is followed
    tracker.feed_lines([metrics(f"rank {rank}", 1, loss=1.0) for rank in range(2, 2 + OTHER_SERIES + 10)])
    others = tracker.state()["others"]["loss"]
    assert len(others) == OTHER_SERIES and len(others["rank 0"]["series"]) <= OTHER_POINTS
    assert others["rank 0"]["series"][0] == [1, 1.0] and others["rank 0"]["series"][-1][0] > 900, "the whole curve"


def test_the_view_draws_each_rank_with_its_name_escaped():
    tracker = MetricsTracker()
    tracker.feed_lines([metrics(source, step, loss=1 / step) for step in (1, 2) for source in ("rank 0", "<b>x</b>")])
    state = tracker.state()
    view = {"metrics": state["metrics"], "others": state["others"]}
    html = page({"ti": {"dag_id": "d", "task_id": "t", "state": "running"}, "view": view}, now=0.0)
    assert html.count("<polyline") == 2 and ">rank 0</text>" in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html
