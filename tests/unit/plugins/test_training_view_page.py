"""The training view's page (plugins.training_view): plain HTML and server-drawn SVG from the follow core's
state; what a job or a person wrote shows as text, never as markup or script; a search's trials with the best
marked; the plugin costs nothing heavy to import (the DAG processor and every task load plugins)."""

from __future__ import annotations

import re
import subprocess
import sys
from html import unescape
from html.parser import HTMLParser
from urllib.parse import urljoin

from airflow_ml_provider.plugins.training_view import page, progress
from airflow_ml_provider.reporting.live_view import planned_total

HOSTILE = "<script>alert(1)</script>"


def _view(**extra):
    return {"job": "aml-train-x", "backend": "local", "state": "RUNNING", "updated": 110.0, "started": 100.0,
            "plan": {"unit": "round", "total": 40},
            "metrics": {"auc": {"series": [[1, 0.8], [5, 0.9], [10, 0.95]], "last": 0.95, "best": 0.95,
                                "last_step": 10},
                        HOSTILE: {"series": [[1, 1.0]], "last": 1.0, "best": 1.0, "last_step": 1}},
            "timeline": [[100.0, "Job is RUNNING"]], "tail": [["rank 0", f"loss went {HOSTILE}"]], **extra}


def _data(view=None, result=None, state="running", targets=None, links=(), search=None):
    return {"ti": {"dag_id": "d", "run_id": "r", "task_id": "train", "map_index": -1, "state": state},
            "view": view, "result": result, "targets": targets or {}, "links": list(links), "search": search}


class _Elements(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)


def _tags(html: str) -> list[str]:
    parser = _Elements()
    parser.feed(html)
    return parser.tags


def test_a_metric_name_or_log_line_holding_html_shows_as_text():
    html = page(_data(_view()))
    assert "script" not in _tags(html)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and HOSTILE not in html


def test_a_running_job_shows_its_curves_the_gate_target_progress_and_refreshes():
    html = page(_data(_view(), targets={"auc": 0.9}), now=110.0)
    assert "<meta http-equiv='refresh'" in html
    assert html.count("<svg") == 2 and 'class="target"' in html and "target 0.9" in html
    assert "10 of 40 rounds, about 30 s left" in html  # 10 rounds in 10 s: 30 s for the other 30
    assert "[rank 0] loss went" in html and "Job is RUNNING" in html


def test_a_finished_task_stops_refreshing_and_links_only_web_addresses():
    html = page(_data(_view(state="SUCCEEDED"), state="success",
                      links=[("MLflow (evaluate)", "http://mlflow/#/runs/1"), ("bad", "javascript:alert(1)")]))
    assert "http-equiv='refresh'" not in html
    assert "href='http://mlflow/#/runs/1'" in html and "javascript:" not in html


def test_a_search_lists_its_trials_and_marks_the_best():
    result = {"best_trial": 2, "trials": [
        {"number": 0, "state": "COMPLETE", "value": 0.81, "params": {"learning_rate": 0.1, "kind": HOSTILE},
         "job_name": "aml-t0"},
        {"number": 1, "state": "PRUNED", "value": None, "params": {"learning_rate": 0.3}, "job_name": "aml-t1"},
        {"number": 2, "state": "COMPLETE", "value": 0.93, "params": {"learning_rate": 0.05}, "job_name": "aml-t2"}]}
    html = page(_data(None, result, state="success", search=result))  # a finished search's: its summary
    rows = re.findall(r"<tr class='(best)?'><td><a href='[^']+'>(\d+)</a>( \(best\))?</td>", html)
    assert [(number, bool(best)) for best, number, _ in rows] == [("0", False), ("1", False), ("2", True)]
    assert html.count('class="best"') == 2  # the best trial's point, on the objective plot and on learning_rate's
    assert "script" not in _tags(html)
    assert "objective per trial" in html and "objective against learning_rate" in html  # no metric recorded
    named = {**result, "objective_metric": "auc", "direction": "maximize"}  # as the search recorded it
    html = page(_data(None, named, state="success", search=named))
    assert "auc per trial (maximize)" in html and "auc against learning_rate" in html
    assert "<th>auc (maximize)</th>" in html and "objective" not in html


def test_a_sweeps_best_lists_the_sweeps_task_instances_linking_their_views_and_logs():
    """``plugins.sweep_trials``' listing: trial numbers are the sweep's map indexes; each links to that task
    instance's view and to Airflow's page of it (its log), relative to the ``.best`` task's view."""
    sweep = {"sweep": "sweep", "best_trial": 1, "objective_metric": "loss", "direction": "minimize", "trials": [
        {"number": 0, "state": "success", "value": 0.4, "params": {"lr": 0.1}, "job_name": "aml-s0"},
        {"number": 1, "state": "success", "value": 0.2, "params": {"lr": 0.2}, "job_name": "aml-s1"},
        {"number": 2, "state": "running", "value": None, "params": {"lr": 0.3}, "job_name": None}]}
    ti = {"dag_id": "d", "run_id": "manual__1+00:00", "task_id": "sweep.best", "map_index": -1, "state": "success"}
    html = page({**_data(search=sweep), "ti": ti})
    rows = re.findall(r"<tr class='(best)?'><td><a href='([^']+)'>(\d)</a>[^<]*</td><td>(\w+)</td>.*?"
                      r"<td><a href='([^']+)'>log</a></td></tr>", html)
    assert [(number, state, bool(best)) for best, _, number, state, _ in rows] == [
        ("0", "success", False), ("1", "success", True), ("2", "running", False)]
    base = "http://airflow/ml-training/ti/d/manual__1%2B00%3A00/sweep.best?map_index=-1"
    assert [urljoin(base, unescape(view)) for _, view, _, _, _ in rows] == [
        f"http://airflow/ml-training/ti/d/manual__1%2B00%3A00/sweep?map_index={i}" for i in range(3)]
    assert [urljoin(base, unescape(log)) for _, _, _, _, log in rows] == [
        f"http://airflow/dags/d/runs/manual__1%2B00%3A00/tasks/sweep/mapped/{i}" for i in range(3)]
    assert "loss per trial (minimize)" in html and html.count('class="best"') == 2


def test_a_result_listing_trials_is_no_search_unless_read_says_so():
    """A recipe sweep's ``.best`` summary lists its trials by map index (``trial``), not by trial number: read()
    gives only a search's trials as ``search``, and the page shows no other result as trials."""
    best = {"best_trial": 1, "trials": [{"trial": 0, "params": {}, "value": 0.2, "job_name": "aml-t0"},
                                        {"trial": 1, "params": {}, "value": 0.1, "job_name": "aml-t1"}]}
    html = page(_data(None, best, state="success"))
    assert "d / train: task success" in html and "Trials" not in html


def test_progress_and_the_planned_total_come_from_the_job_and_its_command():
    assert planned_total(["python", "-m", "t", "--num-boost-round", "60"]) == {"unit": "round", "total": 60}
    assert planned_total(["python", "-m", "t", "--epochs=3"]) == {"unit": "epoch", "total": 3}
    assert planned_total(["python", "-c", "pass"]) is None
    assert progress(_view(), now=110.0) == {"unit": "round", "done": 10, "total": 40, "eta_s": 30.0}


def test_loading_the_plugin_imports_nothing_heavy():
    """Airflow imports provider plugins in the DAG processor and in every task: the plugin's module adds no
    FastAPI, jsonschema or database model import there (its app is built on the first request)."""
    script = ("import sys; import airflow.sdk; before = set(sys.modules); "
              "import airflow_ml_provider.plugins.provider_plugin as p; "
              "print(sorted(set(sys.modules) - before)); print(p.IMPORT_MS)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.splitlines()
    added = eval(out[0])  # noqa: S307 - a list literal this test's own subprocess printed
    heavy = [name for name in added if name.split(".")[0] in ("fastapi", "starlette", "jsonschema", "sqlalchemy")
             or name.startswith(("airflow.models", "airflow.api_fastapi"))]
    assert heavy == [], heavy
    print(f"plugin import: {float(out[1]):.1f} ms, {len(added)} modules")
