"""The training view: a task instance's job as a page of plain HTML and server-drawn SVG (no JavaScript), from
what the follow core saved (``ml_training_view`` while the task follows the job, ``ml_follow_state`` while it is
deferred) and the task's result, never by reading the job's log again: metric curves (the gate's threshold
drawn, the other ranks' curves beside the followed one's), progress and ETA, the job's state timeline, the
workers' CPU and memory (a local job's launcher's, GPUs where NVML answers; a cluster's metrics API's), the workers'
last lines, the scalars of the job's TensorBoard directory, links to MLflow; for a search (and a recipe sweep's
``.best``), its trials as a table and plots with the best marked, the objective named by its metric. Every text from
a job or a person is escaped."""

from __future__ import annotations

import re
import time
from html import escape
from typing import Any
from urllib.parse import quote

from airflow_ml_provider.logs.display import format_line
from airflow_ml_provider.logs.source import LogLine
from airflow_ml_provider.plugins.charts import line_chart

REFRESH_S = 5
_PARAM = re.compile(r"\{\{\s*params\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
ENDED = {"success", "failed", "skipped", "upstream_failed", "removed"}
STYLE = """body{font:14px sans-serif;margin:16px;color:#222}h1{font-size:18px}h2{font-size:15px;margin-top:20px}
.chart{border:1px solid #ddd;margin:4px}.axis{stroke:#888}.curve{fill:none;stroke:#1f6feb;stroke-width:2}
.point{fill:#1f6feb}.best{fill:#d4380d}.target{stroke:#d4380d;stroke-dasharray:6 4}.tick{font-size:10px;fill:#555}
.title{font-size:12px;font-weight:bold}table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:2px 6px}
tr.best{background:#fff1e6}pre{background:#f6f8fa;padding:8px;white-space:pre-wrap;max-height:300px;overflow:auto}
.bar{background:#eee;width:400px;height:12px}.bar>div{background:#1f6feb;height:12px}"""


def gate_targets(dag, conf: dict[str, Any]) -> dict[str, float]:
    """The thresholds of the DAG's promotion gates, their ``{{ params.x }}`` filled in from the run's conf (else
    the Param's default): the target line drawn on a metric's curve."""
    targets = {}
    for task in getattr(dag, "tasks", ()):
        thresholds = getattr(task, "thresholds", None) if task.task_type == "ModelGateOperator" else None
        for name, bound in (thresholds or {}).items():
            if isinstance(bound, str) and (match := _PARAM.fullmatch(bound.strip())):
                bound = conf.get(match[1], dag.params[match[1]] if match[1] in dag.params else None)
            try:
                if float(bound):  # 0: no threshold to draw (a Param left at its "any" default)
                    targets[name] = float(bound)
            except (TypeError, ValueError):
                continue
    return targets


def progress(view: dict[str, Any], now: float) -> dict[str, Any] | None:
    """Done of the planned rounds, epochs or steps, and the time left at the rate so far."""
    plan = view.get("plan")
    done = max((m.get("last_step") or 0 for m in (view.get("metrics") or {}).values()), default=0)
    if not plan or not plan.get("total"):
        return None
    total, eta = int(plan["total"]), None
    started, updated = view.get("started"), view.get("updated") or now
    if started and 0 < done < total and updated > started:
        eta = (updated - started) / done * (total - done)
    return {"unit": plan.get("unit", "step"), "done": min(done, total), "total": total, "eta_s": eta}


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min {secs} s" if minutes else f"{secs} s"


def page(data: dict[str, Any], now: float | None = None) -> str:
    """The view of one task instance: ``data`` as ``read`` gathers it."""
    view, ti = data.get("view") or {}, data["ti"]
    running = ti["state"] not in ENDED
    parts = [*head(ti["task_id"], running),
             f"<h1>{escape(ti['dag_id'])} / {escape(ti['task_id'])}{_index(ti)}: task {escape(str(ti['state']))}"
             f"{', job ' + escape(str(view['state'])) if view.get('state') else ''}</h1>",
             *job_sections(data, running, _search(data.get("search") or {}, ti), now)]
    if not view and not data.get("result"):
        parts.append("<p>No job followed by this task yet.</p>")
    parts.append("</body></html>")
    return "".join(parts)


def _index(ti: dict[str, Any]) -> str:
    """`` [3]`` after a mapped task instance's task id, as Airflow's UI names it; nothing for an unmapped one."""
    index = int(ti.get("map_index", -1))
    return f" [{index}]" if index >= 0 else ""


def head(title: str, running: bool) -> list[str]:
    """A page's head: reloading itself every ``REFRESH_S`` while its task runs."""
    return [f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>",
            f"<meta http-equiv='refresh' content='{REFRESH_S}'>" if running else "",
            f"<style>{STYLE}</style></head><body>"]


def job_sections(data: dict[str, Any], running: bool, between: list[str] | None = None,
                 now: float | None = None) -> list[str]:
    """What a page shows of a followed job (``data["view"]``, a LiveView snapshot or the follow core's state):
    its name and backend, progress, curves, TensorBoard scalars, ``between``, links, timeline, resources and
    last lines."""
    now = time.time() if now is None else now
    view = data.get("view") or {}
    parts = []
    if view.get("job"):
        parts.append(f"<p>Job <code>{escape(view['job'])}</code> on backend {escape(str(view.get('backend')))}"
                     f"{'; preempted ' + str(int(view['preemptions'])) + ' time(s)' if view.get('preemptions') else ''}"
                     "</p>")
    if (done := progress(view, now)) is not None:
        share = done["done"] / done["total"]
        eta = f", about {_duration(done['eta_s'])} left" if done["eta_s"] is not None and running else ""
        parts.append(f"<p>{done['done']} of {done['total']} {escape(done['unit'])}s{eta}</p>"
                     f"<div class='bar'><div style='width:{share * 100:.1f}%'></div></div>")
    parts += _curves(view, data.get("targets") or {})
    parts += _tensorboard(data.get("tensorboard"), data.get("targets") or {})
    parts += between or []
    parts += _links(data.get("links") or [])
    if timeline := view.get("timeline"):
        parts.append("<h2>Timeline</h2><table><tr><th>when (UTC)</th><th>what</th></tr>")
        parts += [f"<tr><td>{time.strftime('%H:%M:%S', time.gmtime(when))}</td><td>{escape(str(what))}</td></tr>"
                  for when, what in timeline]
        parts.append("</table>")
    parts += _resources(view.get("resources"))
    if tail := view.get("tail"):
        parts.append("<h2>Workers' last lines</h2><pre>")
        parts += [escape(format_line(LogLine(str(source), str(text)))) + "\n" for source, text in tail]
        parts.append("</pre>")
    return parts


def ti_path(ti: dict[str, Any]) -> str:
    """``<dag>/<run>/<task>`` of the task instance, each part quoted: the pages' routes end with it."""
    return "/".join(quote(str(ti[key]), safe="") for key in ("dag_id", "run_id", "task_id"))


def trial_href(ti: dict[str, Any], number: int) -> str:
    """Trial ``number``'s page, relative to the task instance's view (``/ti/<dag>/<run>/<task>``)."""
    return f"../../../trial/{ti_path(ti)}/{int(number)}?map_index={int(ti.get('map_index', -1))}"


def mapped_href(ti: dict[str, Any], task_id: str, map_index: int) -> str:
    """The view of map index ``map_index`` of the run's task ``task_id``, relative to a task instance's view."""
    return f"../../../ti/{ti_path({**ti, 'task_id': task_id})}?map_index={int(map_index)}"


def log_href(ti: dict[str, Any], task_id: str, map_index: int) -> str:
    """Airflow's own page of that task instance (its log), relative to a task instance's view (under the API
    server's root, as ``/ml-training`` is)."""
    dag, run, task = (quote(str(part), safe="") for part in (ti["dag_id"], ti["run_id"], task_id))
    return f"../../../../dags/{dag}/runs/{run}/tasks/{task}/mapped/{int(map_index)}"


def _curves(view: dict[str, Any], targets: dict[str, float]) -> list[str]:
    metrics = view.get("metrics") or {}
    if not metrics:
        return []
    parts = ["<h2>Metrics</h2>"]
    others = view.get("others") or {}
    for name, metric in sorted(metrics.items()):
        title = f"{name} (last {metric.get('last', float('nan')):.5g}, best {metric.get('best', float('nan')):.5g})"
        ranks = [(str(source), curve.get("series") or []) for source, curve in sorted((others.get(name) or {}).items())
                 if isinstance(curve, dict)]
        parts.append(line_chart(title, metric.get("series") or [], targets.get(name),
                                x_label=(view.get("plan") or {}).get("unit", "step"), others=ranks,
                                label=str(metric.get("source") or "")))
    return parts


def _tensorboard(board: Any, targets: dict[str, float]) -> list[str]:
    """The scalars the job wrote to its TensorBoard directory (``plugins.tensorboard_scalars``), and how to point
    a TensorBoard at it: a chart per tag, each run's curve of it in that chart (named in its legend: ``run .``
    for the directory's own files, ``run train`` for its ``train/`` folder's); tags and run names are the job's
    words, escaped."""
    if not isinstance(board, dict) or not board.get("dir"):
        return []
    logdir = str(board["dir"])
    parts = [f"<h2>TensorBoard</h2><p>Scalars from <code>{escape(logdir)}</code>; to browse them in TensorBoard: "
             f"<code>tensorboard --logdir {escape(logdir)}</code>"
             f"{' (' + escape(str(board['note'])) + ')' if board.get('note') else ''}</p>"]
    runs = {str(run): tags for run, tags in (board.get("runs") or {}).items() if isinstance(tags, dict)}
    for tag in sorted({tag for tags in runs.values() for tag in tags}):
        first, *rest = [run for run in sorted(runs, key=lambda run: (run != ".", run)) if tag in runs[run]]
        title = f"{tag} (TensorBoard{'' if first == '.' or rest else ', run ' + first})"
        parts.append(line_chart(title, runs[first][tag] or [], targets.get(tag), label=f"run {first}",
                                others=[(f"run {run}", runs[run][tag] or []) for run in rest]))
    return parts


_RESOURCE_COLUMNS = {"procs": "processes", "pods": "pods", "gpu": "GPU (% busy)", "gpu_mem_mib": "GPU memory (MiB)"}


def _resources(sample: Any) -> list[str]:
    """The last sample of the workers' CPU and memory: the local launcher's (jobs.backends.local.resources, GPUs
    where NVML answers) or the cluster's metrics API's (jobs.backends.kubernetes.pod_metrics); or why there is none."""
    if not isinstance(sample, dict):
        return []
    workers = sample.get("workers") if isinstance(sample.get("workers"), dict) else {}
    note = f"<p>{escape(str(sample['note']))}</p>" if sample.get("note") else ""
    if not workers:
        return [f"<h2>Resources</h2>{note}"] if note else []
    at, source = sample.get("at"), sample.get("source")
    when = f" at {time.strftime('%H:%M:%S', time.gmtime(at))} UTC" if isinstance(at, int | float) else ""
    memory = "working set" if source else "resident"
    extra = [key for key in _RESOURCE_COLUMNS if any(isinstance(use, dict) and key in use for use in workers.values())]
    parts = [f"<h2>Resources{when}</h2>{note}",
             f"<p>From the cluster's metrics API ({escape(str(source))}), per pod summed by worker.</p>" if source else "",
             f"<table><tr><th>worker</th><th>CPU (% of a core)</th><th>memory (MiB, {memory})</th>"
             + "".join(f"<th>{_RESOURCE_COLUMNS[key]}</th>" for key in extra) + "</tr>"]
    for rank, use in workers.items():
        use = use if isinstance(use, dict) else {}
        cells = [escape(str(use.get(key, ""))) for key in ("cpu", "mem_mib", *extra)]
        who = f"rank {rank}" if str(rank).isdigit() else str(rank)
        parts.append(f"<tr><td>{escape(who)}</td>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
    parts.append("</table>")
    return parts


def objective(found: dict[str, Any]) -> tuple[str, str]:
    """The objective as a search (or a sweep's ``.best``) recorded it: its metric's name ("objective" where none
    was recorded) and its direction as the pages add it (`` (minimize)``; "" where unknown)."""
    metric, direction = found.get("objective_metric"), found.get("direction")
    return (metric if isinstance(metric, str) and metric else "objective",
            f" ({direction})" if direction in ("maximize", "minimize") else "")


def _search(result: dict[str, Any], ti: dict[str, Any]) -> list[str]:
    """A search's trials: a table, the objective (named by its metric) per trial and each numeric parameter against
    it, best marked (a running search's so far, from its study: ``plugins.search_trials``), every row and point
    linking to the trial's page; a sweep's (``plugins.sweep_trials``: its mapped task instances) linking to each
    one's view and its log."""
    trials = [t for t in result.get("trials") or [] if isinstance(t, dict)]
    if result.get("note"):
        return [f"<h2>Trials</h2><p>Not shown while the search runs: {escape(str(result['note']))}</p>"]
    if not trials:
        return []
    best, sweep = result.get("best_trial"), result.get("sweep")
    name, way = objective(result)

    def href(t: dict[str, Any]) -> str | None:
        number = t.get("number")
        if not isinstance(number, int) or isinstance(number, bool):
            return None
        return mapped_href(ti, sweep, number) if isinstance(sweep, str) else trial_href(ti, number)

    scored = [t for t in trials if isinstance(t.get("value"), int | float)]
    marked = next((i for i, t in enumerate(scored) if t.get("number") == best), None)
    parts = ["<h2>Trials</h2>", line_chart(f"{name} per trial{way}", [[t["number"], t["value"]] for t in scored],
                                            x_label="trial", marked=marked, connect=False,
                                            hrefs=[href(t) for t in scored])]
    names = sorted({param for t in scored for param, value in (t.get("params") or {}).items()
                    if isinstance(value, int | float) and not isinstance(value, bool)})
    for param in names:
        points = [(t, t["params"][param]) for t in scored if isinstance((t.get("params") or {}).get(param), int | float)]
        mark = next((i for i, (t, _) in enumerate(points) if t.get("number") == best), None)
        parts.append(line_chart(f"{name} against {param}", [[value, t["value"]] for t, value in points],
                                x_label=param, marked=mark, connect=False, hrefs=[href(t) for t, _ in points]))
    parts.append(f"<table><tr><th>trial</th><th>state</th><th>{escape(name + way)}</th><th>parameters</th>"
                 f"<th>job</th>{'<th>log</th>' if isinstance(sweep, str) else ''}</tr>")
    for t in trials:
        params = ", ".join(f"{escape(str(k))}={escape(str(v))}" for k, v in sorted((t.get("params") or {}).items()))
        number = escape(str(t.get("number")))
        link = f"<a href='{escape(url, quote=True)}'>{number}</a>" if (url := href(t)) else number
        log = f"<td><a href='{escape(log_href(ti, sweep, t['number']), quote=True)}'>log</a></td>" \
            if isinstance(sweep, str) and url else ""
        parts.append(f"<tr class='{'best' if t.get('number') == best else ''}'><td>{link}"
                     f"{' (best)' if t.get('number') == best else ''}</td><td>{escape(str(t.get('state')))}</td>"
                     f"<td>{escape(str(t.get('value')))}</td><td>{params}</td>"
                     f"<td><code>{escape(str(t.get('job_name') or ''))}</code></td>{log}</tr>")
    parts.append("</table>")
    return parts


def _links(links: list[tuple[str, str]]) -> list[str]:
    shown = [(what, url) for what, url in links if isinstance(url, str) and url.startswith(("http://", "https://"))]
    if not shown:
        return []
    return ["<h2>Links</h2><ul>"] + [f"<li><a href='{escape(url, quote=True)}' target='_blank' rel='noopener'>"
                                      f"{escape(what)}</a></li>" for what, url in shown] + ["</ul>"]
