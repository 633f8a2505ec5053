"""A search trial's page: its job as the training view shows a training job (``training_view.job_sections``: state,
curves, TensorBoard scalars, timeline, last lines, from the view the search saved of the trial's job as it followed
it, ``reporting.live_view.trial_views``), with what the study records of the trial (state, parameters, objective
per step, failure; the objective named by the metric and direction the search recorded) and a link to its MLflow
run. Every text from the study or the job is escaped."""

from __future__ import annotations

from html import escape
from typing import Any

from airflow_ml_provider.plugins.charts import line_chart
from airflow_ml_provider.plugins.training_view import ENDED, head, job_sections, objective, ti_path

_TRIAL_ENDED = {"COMPLETE", "PRUNED", "FAIL"}


def view_href(ti: dict[str, Any]) -> str:
    """The search task's view, relative to a trial's page (``/trial/<dag>/<run>/<task>/<number>``)."""
    return f"../../../../ti/{ti_path(ti)}?map_index={int(ti.get('map_index', -1))}"


def trial_page(data: dict[str, Any], now: float | None = None) -> str:
    """Trial ``data["number"]`` of a search task instance: ``data`` as ``view_app.read_trial`` gathers it."""
    ti, trial, view = data["ti"], data.get("trial") or {}, data.get("view") or {}
    state = trial.get("state")
    running = ti["state"] not in ENDED and state not in _TRIAL_ENDED
    number = escape(str(data["number"]))
    parts = [*head(f"{ti['task_id']} trial {data['number']}", running),
             f"<h1>{escape(ti['dag_id'])} / {escape(ti['task_id'])}: trial {number}"
             f"{' ' + escape(str(state)) if state else ''}"
             f"{', job ' + escape(str(view['state'])) if view.get('state') else ''}</h1>",
             f"<p><a href='{escape(view_href(ti), quote=True)}'>All trials of the search</a>"
             f"{' (the best trial)' if data.get('best') else ''}</p>"]
    if trial.get("note"):
        parts.append(f"<p>Its study: {escape(str(trial['note']))}</p>")
    named, way = objective(data.get("objective") or {})
    rows = [(named + way, trial.get("value")), ("job", trial.get("job_name")), ("failure", trial.get("failure"))]
    rows += [(f"parameter {name}", value) for name, value in sorted((trial.get("params") or {}).items())]
    shown = [(name, value) for name, value in rows if value is not None]
    if shown:
        parts.append("<table>" + "".join(f"<tr><th>{escape(str(name))}</th><td>{escape(str(value))}</td></tr>"
                                         for name, value in shown) + "</table>")
    if steps := trial.get("steps"):
        parts += ["<h2>Objective per step</h2>",
                  line_chart(f"{named}{way}, as reported to the study", steps)]
    parts += job_sections(data, running, None, now)
    if not view:
        parts.append(f"<p>{escape(data.get('view_note') or 'No view of its job was saved.')}</p>")
    parts.append("</body></html>")
    return "".join(parts)
