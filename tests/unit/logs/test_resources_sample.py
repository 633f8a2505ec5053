"""A local job's resources sample as the follow core keeps it and the training view shows it: the launcher's line
only, every value bounded, every text escaped."""

from __future__ import annotations

import json

from airflow_ml_provider.logs.display import format_line
from airflow_ml_provider.logs.metrics import MAX_RESOURCE_ENTRIES, MetricsTracker
from airflow_ml_provider.logs.source import LogLine
from airflow_ml_provider.plugins.training_view import page

SAMPLE = {"0": {"cpu": 97.5, "mem_mib": 412.3, "procs": 1}, "launcher": {"cpu": 0.3, "mem_mib": 40.0, "procs": 2}}


def line(source: str, workers, **extra) -> LogLine:
    return LogLine(source, json.dumps({"event": "resources", "at": 1764680000.0, "workers": workers, **extra}))


def test_the_last_launcher_sample_is_kept_and_survives_a_resumed_tracker():
    tracker = MetricsTracker()
    tracker.feed_lines([line("launcher", {"0": {"cpu": 1.0, "mem_mib": 1.0, "procs": 1}}), line("launcher", SAMPLE)])
    resumed = MetricsTracker(state=tracker.state())
    assert resumed.state()["resources"] == {"at": 1764680000.0, "workers": SAMPLE}


def test_a_workers_sample_and_an_unbounded_one_are_ignored():
    tracker = MetricsTracker()
    tracker.feed_lines([line("rank 0", SAMPLE)])  # a worker cannot speak for the launcher
    assert tracker.state()["resources"] is None and not tracker.warnings
    bad = [{"0": {"cpu": float("inf"), "mem_mib": 1, "procs": 1}}, {"0": {"cpu": -1, "mem_mib": 1, "procs": 1}},
           {"<b>": {"cpu": 1, "mem_mib": 1, "procs": 1}}, {"0": "busy"}, ["0"],
           {str(i): {"cpu": 1, "mem_mib": 1, "procs": 1} for i in range(MAX_RESOURCE_ENTRIES + 1)}]
    for workers in bad:
        tracker.feed_lines([LogLine("launcher", json.dumps({"event": "resources", "workers": workers}))])
    assert tracker.state()["resources"] is None
    assert tracker.state()["ignored"]["resources"] == len(bad)


def test_the_task_log_reads_a_sample_as_one_short_line():
    assert format_line(line("launcher", SAMPLE)) == ("[launcher] resources  rank 0 cpu 98% 412 MiB  "
                                                     "launcher cpu 0% 40 MiB")


def test_the_view_shows_the_sample_as_a_table_with_every_text_escaped():
    ti = {"dag_id": "d", "task_id": "t", "state": "running"}
    html = page({"ti": ti, "view": {"resources": {"at": 1764680000.0, "workers": SAMPLE}}}, now=1764680001.0)
    assert "<h2>Resources at 12:53:20 UTC</h2>" in html
    assert "<tr><td>rank 0</td><td>97.5</td><td>412.3</td><td>1</td></tr>" in html
    assert "<tr><td>launcher</td><td>0.3</td><td>40.0</td><td>2</td></tr>" in html
    hostile = page({"ti": ti, "view": {"resources": {"workers": {"0": {"cpu": "<script>x</script>"}}}}})
    assert "<script>x" not in hostile and "&lt;script&gt;x&lt;/script&gt;" in hostile


def test_a_clusters_sample_is_shown_per_worker_with_its_source_and_a_note_as_text():
    ti = {"dag_id": "d", "task_id": "t", "state": "running"}
    cluster = {"at": 1764680000.0, "source": "metrics.k8s.io",
               "workers": {"launcher": {"cpu": 0.1, "mem_mib": 64.0, "pods": 1},
                           "worker 0": {"cpu": 98.8, "mem_mib": 1025.0, "pods": 1}}}
    html = page({"ti": ti, "view": {"resources": cluster}}, now=1764680001.0)
    assert "From the cluster's metrics API (metrics.k8s.io)" in html
    assert "<th>memory (MiB, working set)</th><th>pods</th></tr>" in html
    assert "<tr><td>worker 0</td><td>98.8</td><td>1025.0</td><td>1</td></tr>" in html
    note = {"at": 1.0, "workers": {}, "source": "metrics.k8s.io", "note": "no <b>metrics</b> here"}
    html = page({"ti": ti, "view": {"resources": note}})
    assert "<h2>Resources</h2><p>no &lt;b&gt;metrics&lt;/b&gt; here</p>" in html and "<table><tr><th>worker" not in html


def test_gpu_columns_appear_only_where_a_worker_has_them():
    tracker = MetricsTracker()
    gpu = {"0": {"cpu": 90.0, "mem_mib": 900.0, "procs": 1, "gpu": 87.0, "gpu_mem_mib": 2048.0},
           "launcher": {"cpu": 0.3, "mem_mib": 40.0, "procs": 2}}
    tracker.feed_lines([line("launcher", gpu)])
    html = page({"ti": {"dag_id": "d", "task_id": "t", "state": "running"}, "view": {"resources": tracker.resources}})
    assert "<th>processes</th><th>GPU (% busy)</th><th>GPU memory (MiB)</th></tr>" in html
    assert "<tr><td>rank 0</td><td>90.0</td><td>900.0</td><td>1</td><td>87.0</td><td>2048.0</td></tr>" in html
    assert "<tr><td>launcher</td><td>0.3</td><td>40.0</td><td>2</td><td></td><td></td></tr>" in html
    assert "GPU" not in page({"ti": {"dag_id": "d", "task_id": "t", "state": "running"},
                              "view": {"resources": {"workers": SAMPLE}}})
