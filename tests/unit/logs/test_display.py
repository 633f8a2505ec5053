"""Task-log lines: the runtime's JSON events compact, everything else as printed."""

from airflow_ml_provider.logs.display import format_line
from airflow_ml_provider.logs.source import LogLine


def test_metric_events_read_as_one_compact_line():
    line = LogLine("rank 0", '{"auc": 0.96904, "event": "metrics", "loss": 0.33249, "rank": 0, "step": 30}')
    assert format_line(line) == "[rank 0] step 30  auc=0.9690  loss=0.3325"


def test_other_events_are_named_and_plain_lines_unchanged():
    line = LogLine("rank 0", '{"epoch": 3, "event": "checkpoint", "path": "/a/ckpt-3", "step": 30}')
    assert format_line(line) == "[rank 0] checkpoint epoch 3 step 30  path=/a/ckpt-3"
    assert format_line(LogLine("launcher", '{"not": "an event"}')) == '[launcher] {"not": "an event"}'
