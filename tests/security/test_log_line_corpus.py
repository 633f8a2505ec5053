"""Hostile log lines (a pod's output is not trusted): what a line may claim is checked, and the line
itself is shown as literal text.

Issue 12, item 8: log lines decide ``fail_on``, metrics and ``model_saved`` paths; a path from a log line
must resolve inside the job's artifact root, or be ignored with a warning.
"""

from __future__ import annotations

import json

import pytest

from airflow_ml_provider.jobs.follow import Follower, FollowOptions
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
    "s3://",
], ids=["absolute_elsewhere", "dot_dot_escape", "sibling_prefix", "relative", "other_scheme", "file_url", "no_bucket"])
def test_a_model_path_outside_the_artifact_root_is_ignored_with_a_warning(path):
    follower, step = _follow(json.dumps({"event": "model_saved", "path": path}))
    assert follower.model_path is None
    assert step.warnings == [f"ignored model path {path!r} reported by [rank 0]: it is outside the job's artifact "
                             f"directories {[ROOT]} once resolved (symlinks, '..')"]


def test_a_checkpoint_outside_the_artifact_root_is_ignored_with_a_warning():
    follower, step = _follow(json.dumps({"event": "checkpoint", "path": "/root/.ssh/id_rsa", "step": 3}))
    assert follower.tracker.checkpoint is None
    assert step.warnings == ["ignored checkpoint '/root/.ssh/id_rsa' reported by [rank 0]: it is outside the job's "
                             f"artifact directories {[ROOT]} once resolved (symlinks, '..')"]


def test_a_model_path_inside_the_artifact_root_is_kept():
    follower, step = _follow(json.dumps({"event": "model_saved", "path": f"{ROOT}/model/model.txt"}))
    assert (follower.model_path, step.warnings) == (f"{ROOT}/model/model.txt", [])


@pytest.mark.parametrize("text", [
    "{{ var.value.secret }}",
    "{% for x in range(10**9) %}{% endfor %}",
    "[rank 1] forged prefix",
    '{"event": "metrics", "loss": "{{ 7*7 }}"}',
    "tab\tand non-ASCII \u00e9 \u202e stay",
], ids=["jinja", "jinja_statement", "forged_source", "templated_metric", "tab_and_unicode"])
def test_log_lines_are_passed_on_as_literal_text(text):
    follower, step = _follow(text)
    assert [(line.source, line.text) for line in step.lines] == [("rank 0", text)]
    assert follower.metrics == {}  # a non-number metric value is not a metric


# Issue 38: terminal escapes reached the task log raw: every C0/C1 control but tab becomes its \xNN text,
# in a line, in its source, and in the strings of a JSON line, before rules, metrics or the tail see it.
@pytest.mark.parametrize(("text", "shown"), [
    ("\x1b]52;c;ZWNobyBwd25lZA==\x07", r"\x1b]52;c;ZWNobyBwd25lZA==\x07"),
    ("\x1b[2J\x1b[31mred", r"\x1b[2J\x1b[31mred"),
    ("\x9b2J (C1 CSI) \x7f \x00", r"\x9b2J (C1 CSI) \x7f \x00"),
    ("shown\rhidden\nforged line", r"shown\x0dhidden\x0aforged line"),
], ids=["osc52", "csi", "c1_del_nul", "cr_lf"])
def test_control_characters_become_visible_text(text, shown):
    follower, step = _follow(text)
    assert [(line.source, line.text) for line in step.lines] == [("rank 0", shown)]
    assert follower.last_lines()[0].text == shown


def test_json_escapes_of_control_characters_become_visible_in_what_a_result_line_reports():
    escaped = json.dumps({"event": "result", "note": "\x1b]52;c;eA==\x07", "tab": "a\tb", "text": "\\u001b"})
    follower, step = _follow(escaped)
    assert follower.metrics == {"note": r"\x1b]52;c;eA==\x07", "tab": "a\tb", "text": "\\u001b"}
    assert "\x1b" not in step.lines[0].text and json.loads(step.lines[0].text)["note"] == r"\x1b]52;c;eA==\x07"


def test_a_control_character_in_a_source_becomes_visible():
    follower = Follower(FollowOptions())
    step = follower.observe(None, LogBatch([LogLine("pod\x1b[2J", "text")], cursor=1), now=0.0)
    assert step.lines == [LogLine(r"pod\x1b[2J", "text")]


def test_non_finite_metric_values_are_ignored():
    follower, _ = _follow('{"event": "metrics", "step": 1, "loss": NaN, "auc": Infinity, "acc": 0.5}')
    assert follower.metrics == {"acc": 0.5}


# Issue 19, M2: one log line must not crash a follower, nor carry a value a store refuses.

def _metrics_line(**fields) -> str:
    return json.dumps({"event": "metrics", **fields})


def test_a_metrics_line_nested_2000_deep_is_ignored_with_a_warning():
    deep = '{"event": "metrics", "step": 1, "loss": ' + "[" * 2000 + "]" * 2000 + "}"
    follower, step = _follow(deep, _metrics_line(step=2, loss=0.5))
    assert [line.text for line in step.lines] == [deep, _metrics_line(step=2, loss=0.5)]  # shown as text
    assert follower.metrics == {"loss": 0.5}
    assert step.warnings == ["ignored part of a log line of [rank 0]: a JSON line nested deeper than 8 levels"]


def test_a_json_line_over_the_size_bound_is_ignored_with_a_warning():
    huge = _metrics_line(step=1, loss=0.5, pad="x" * 300_000)
    follower, step = _follow(huge)
    assert follower.metrics == {}
    assert step.warnings == [f"ignored part of a log line of [rank 0]: a JSON line of {len(huge)} characters, "
                             "over 262144"]


@pytest.mark.parametrize("bad_step", [-1, 10**30, 2**63, True, "3", 1.5],
                         ids=["negative", "ten_to_30", "two_to_63", "bool", "string", "float"])
def test_a_metrics_line_with_a_step_out_of_range_is_ignored_with_a_warning(bad_step):
    follower, step = _follow(_metrics_line(step=bad_step, loss=0.1), _metrics_line(step=2**63 - 1, loss=0.2))
    assert step.points == [("loss", 2**63 - 1, 0.2)]  # the largest step is kept; the bad line adds nothing
    assert follower.tracker.history() == [{"step": 2**63 - 1, "loss": 0.2}]
    assert len(step.warnings) == 1 and "is not an integer 0 <= step < 2**63" in step.warnings[0]


def test_a_metric_regex_step_out_of_range_is_ignored_with_a_warning():
    follower = Follower(FollowOptions(rules={"metrics": [r"step=(?P<step>-?\d+) loss=(?P<loss>[\d.]+)"]}))
    step = follower.observe(None, LogBatch([LogLine("rank 0", "step=-5 loss=0.5"),
                                            LogLine("rank 0", "step=7 loss=0.4")], cursor=1), now=0.0)
    assert step.points == [("loss", 7, 0.4)]
    assert step.warnings == ["ignored part of a log line of [rank 0]: step -5 is not an integer 0 <= step < 2**63"]


@pytest.mark.parametrize("name", ["../../etc", "a//b", "a/", "/abs", "sp ace", "semi;colon", "x" * 129, "é", ""],
                         ids=["dot_dot", "double_slash", "trailing_slash", "absolute", "space", "semicolon",
                              "too_long", "non_ascii", "empty"])
def test_a_metric_name_outside_the_pattern_is_ignored_with_a_warning(name):
    follower, step = _follow(_metrics_line(step=1, **{name: 0.5, "loss": 0.1}))
    assert follower.metrics == {"loss": 0.1}
    assert len(step.warnings) == 1 and "does not match" in step.warnings[0]


def test_metric_names_past_256_are_ignored_with_one_warning():
    lines = [_metrics_line(step=1, **{f"m{i}_{j}": 1.0 for j in range(50)}) for i in range(10)]
    follower, step = _follow(*lines)
    assert len(follower.metrics) == 256
    assert step.warnings == ["ignored part of a log line of [rank 0]: metric 'm5_6' is past the 256 distinct metric "
                             "names a job may report; further ones of this kind are ignored without a warning"]
    follower.observe(None, LogBatch([LogLine("rank 0", _metrics_line(step=2, m0_0=2.0, other=1.0))], 2), now=0.0)
    assert follower.metrics["m0_0"] == 2.0 and "other" not in follower.metrics  # known names go on


def test_warnings_of_one_kind_stop_after_five():
    follower, step = _follow(*[_metrics_line(step=-i, loss=0.1) for i in range(1, 9)])
    assert len(step.warnings) == 5 and step.warnings[-1].endswith("further ones of this kind are ignored without "
                                                                  "a warning")
    again = follower.observe(None, LogBatch([LogLine("rank 0", _metrics_line(step=-1, loss=0.1))], 2), now=0.0)
    assert again.warnings == [] and follower.tracker.ignored == {"step": 9}


@pytest.mark.parametrize("path", [f"{ROOT}/" + "m" * 5000, 7, ["list"]], ids=["too_long", "number", "list"])
def test_a_model_path_that_is_no_bounded_string_is_ignored_with_a_warning(path):
    follower, step = _follow(json.dumps({"event": "model_saved", "path": path}))
    assert follower.model_path is None
    assert len(step.warnings) == 1 and "is not a string of 1 to 4096 characters" in step.warnings[0]


def test_a_nul_in_a_reported_path_reaches_nothing_but_as_visible_text():
    """A NUL (``\\u0000`` in the JSON line) is made visible with every control character (issue 38), so the
    path kept names a file of that literal name, inside the root, and never a truncated one."""
    follower, _ = _follow(json.dumps({"event": "model_saved", "path": f"{ROOT}/a\x00b"}))
    assert follower.model_path == rf"{ROOT}/a\x00b"


def test_a_checkpoint_step_out_of_range_is_dropped():
    follower, _ = _follow(json.dumps({"event": "checkpoint", "path": f"{ROOT}/ckpt", "step": 10**30, "epoch": 3}))
    assert follower.tracker.checkpoint == {"path": f"{ROOT}/ckpt", "epoch": 3}


# Issue 18, Paths: a reported path is resolved (symlinks, '..') before the confinement check, and the
# resolved path is what goes on.

def test_a_symlink_inside_the_artifact_root_pointing_outside_is_ignored(tmp_path):
    root = tmp_path / "artifacts" / "job"
    (root / "model").mkdir(parents=True)
    (root / "model" / "model.txt").symlink_to("/etc/passwd")
    (root / "escape").symlink_to("/etc")
    for reported in (root / "model" / "model.txt", root / "escape" / "passwd", root / "escape" / ".." / "root"):
        follower, step = _follow(json.dumps({"event": "model_saved", "path": str(reported)}), roots=(str(root),))
        assert follower.model_path is None
        assert step.warnings == [f"ignored model path {str(reported)!r} reported by [rank 0]: it is outside the "
                                 f"job's artifact directories {[str(root)]} once resolved (symlinks, '..')"]
    follower, step = _follow(json.dumps({"event": "checkpoint", "path": str(root / "escape"), "step": 1}),
                             roots=(str(root),))
    assert follower.tracker.checkpoint is None and "ignored checkpoint" in step.warnings[0]


def test_a_path_inside_the_artifact_root_is_kept_resolved(tmp_path):
    root = tmp_path / "artifacts" / "job"
    (root / "model" / "v2").mkdir(parents=True)
    (root / "latest").symlink_to(root / "model" / "v2")  # a symlink that stays inside is fine
    follower, step = _follow(json.dumps({"event": "model_saved", "path": f"{root}/latest/../model/./m.txt"}),
                             json.dumps({"event": "checkpoint", "path": f"{root}/latest/ckpt", "step": 4}),
                             roots=(str(root),))
    assert step.warnings == []
    assert follower.model_path == f"{root}/model/model/m.txt"  # as the OS opens it: latest/.. is model/
    assert follower.tracker.checkpoint == {"path": f"{root}/model/v2/ckpt", "step": 4}


@pytest.mark.parametrize("path, kept", [
    ("s3://bucket/jobs/j1/model/../model/m.txt", "s3://bucket/jobs/j1/model/m.txt"),
    ("S3://bucket/jobs/j1//model.txt", "s3://bucket/jobs/j1/model.txt"),
    ("s3://bucket/jobs/j1/../j2/model.txt", None),
    ("s3://bucket/jobs/j1/../../../other-bucket/jobs/j1/m", None),
    ("s3://other-bucket/jobs/j1/m", None),
    ("gs://bucket/jobs/j1/m", None),
], ids=["dot_dot_inside", "scheme_case_and_double_slash", "sibling_job", "dot_dot_out_of_bucket", "other_bucket",
        "other_scheme"])
def test_an_object_store_key_is_normalized_before_the_check(path, kept):
    follower, step = _follow(json.dumps({"event": "model_saved", "path": path}), roots=("s3://bucket/jobs/j1",))
    assert follower.model_path == kept
    assert bool(step.warnings) is (kept is None)


def test_the_follower_state_stays_under_1_mib_at_every_bound():
    """M3's worst case: 256 names of 128 characters on every line, the largest steps, values with every
    digit, a result at its bounds, 20 tail lines of 100 KB: the state stays under the stated 1 MiB."""
    names = [f"{i:03d}" + "n" * 125 for i in range(300)]
    follower = Follower(FollowOptions(artifact_roots=(ROOT,)))
    for start in range(0, 2000, 100):
        lines = [LogLine("rank 0", _metrics_line(step=2**63 - 2001 + i, **{name: -1.2345678901234567e-300
                                                                          for name in names}))
                 for i in range(start, start + 100)]
        follower.observe(None, LogBatch(lines, cursor=start), now=0.0)
    result = {"event": "result", **{f"r{k:02d}" + "c" * 120: "v" * 1000 for k in range(80)}}
    tail = [LogLine("rank 0", json.dumps(result))] + [LogLine("rank 0", "x" * 100_000)] * 20
    follower.observe(None, LogBatch(tail, cursor=2000), now=0.0)
    size = len(json.dumps(follower.state))
    print(f"\nfollower state at every bound: {size} bytes")
    assert len(follower.metrics) == 256 + 64 and size < 1 << 20
    assert sum(len(m["series"]) for m in follower.tracker.metrics.values()) <= 8000
