"""Hostile log lines (a pod's output is not trusted): what a line may claim is checked, and the line
itself is shown as literal text.

Issue 12, item 8: log lines decide ``fail_on``, metrics and ``model_saved`` paths; a path from a log line
must resolve inside the job's artifact root, or be ignored with a warning.
"""

from __future__ import annotations

import json

import pytest

from airflow_ml_provider.jobs.follow import FollowOptions, Follower
from airflow_ml_provider.logs.source import LogBatch, LogLine

ROOT = "/srv/ml/artifacts/aml-train-1234"


def _follow(*texts: str, roots: tuple[str, ...] = (ROOT,)):
    follower = Follower(FollowOptions(artifact_roots=roots))
    step = follower.observe(None, LogBatch([LogLine("rank 0", text) for text in texts], cursor=1), now=0.0)
    return follower, step


@pytest.mark.parametrize("path", [
    "/etc/passwd",
    f"{ROOT}/../../../../etc/shadow",
    f"{ROOT}-evil/model",
    "relative/model",
    "s3://other-bucket/model",
    "file:///etc/passwd",
], ids=["absolute_elsewhere", "dot_dot_escape", "sibling_prefix", "relative", "other_scheme", "file_url"])
def test_a_model_path_outside_the_artifact_root_is_ignored_with_a_warning(path):
    follower, step = _follow(json.dumps({"event": "model_saved", "path": path}))
    assert follower.model_path is None
    assert step.warnings == [f"ignored model path {path!r} reported by [rank 0]: it is outside the job's artifact "
                             f"directories {[ROOT]}"]


def test_a_checkpoint_outside_the_artifact_root_is_ignored_with_a_warning():
    follower, step = _follow(json.dumps({"event": "checkpoint", "path": "/root/.ssh/id_rsa", "step": 3}))
    assert follower.tracker.checkpoint is None
    assert step.warnings == ["ignored checkpoint '/root/.ssh/id_rsa' reported by [rank 0]: it is outside the job's "
                             f"artifact directories {[ROOT]}"]


def test_a_model_path_inside_the_artifact_root_is_kept():
    follower, step = _follow(json.dumps({"event": "model_saved", "path": f"{ROOT}/model/model.txt"}))
    assert (follower.model_path, step.warnings) == (f"{ROOT}/model/model.txt", [])


@pytest.mark.parametrize("text", [
    "{{ var.value.secret }}",
    "{% for x in range(10**9) %}{% endfor %}",
    "[rank 1] forged prefix",
    "\x1b[2J\x1b[31mterminal escapes",
    '{"event": "metrics", "loss": "{{ 7*7 }}"}',
], ids=["jinja", "jinja_statement", "forged_source", "terminal_escapes", "templated_metric"])
def test_log_lines_are_passed_on_as_literal_text(text):
    follower, step = _follow(text)
    assert [(line.source, line.text) for line in step.lines] == [("rank 0", text)]
    assert follower.metrics == {}  # a non-number metric value is not a metric


def test_non_finite_metric_values_are_ignored():
    follower, _ = _follow('{"event": "metrics", "step": 1, "loss": NaN, "auc": Infinity, "acc": 0.5}')
    assert follower.metrics == {"acc": 0.5}
