"""A recipe sweep's trials for its ``<experiment>.best`` task's view, as a search's view lists its trials: each map
index of the mapped experiment (its task instance's state, its result's parameters and job), with what ``.best``
reported once it ran (each trial's value of its metric, the metric and direction, the best trial), read from the
metadata database. The serialized DAG keeps no argument of ``RecipeBestTrialOperator`` (no template fields):
what it names comes from its summary, or before it ran from its one upstream task, the experiment."""

from __future__ import annotations

from typing import Any

from airflow_ml_provider.plugins.search_trials import MAX_TRIALS_SHOWN

BEST_TASK_TYPE = "RecipeBestTrialOperator"  # recipes.dag's ``<experiment>.best``, as the serialized DAG names it


def is_sweep_best(task: Any) -> bool:
    """Whether ``task`` (a serialized DAG's) reports the best trial of a mapped recipe experiment."""
    return getattr(task, "task_type", None) == BEST_TASK_TYPE


def _experiment(task: Any, summary: dict[str, Any]) -> str | None:
    named = summary.get("experiment")
    if isinstance(named, str):
        return named
    upstream = sorted(getattr(task, "upstream_task_ids", None) or ())
    return upstream[0] if len(upstream) == 1 else None


def sweep_trials(session, task: Any, dag_id: str, run_id: str, summary: Any) -> dict[str, Any] | None:
    """``{"sweep": <experiment task id>, "trials": [{"number": <map index>, "state", "value", "params",
    "job_name"}], "best_trial", "objective_metric", "direction"}`` (the first ``MAX_TRIALS_SHOWN`` map indexes);
    None where the experiment is not known."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    summary = summary if isinstance(summary, dict) else {}
    experiment = _experiment(task, summary)
    if experiment is None:
        return None
    mapped = session.execute(select(TaskInstance.map_index, TaskInstance.state).where(
        TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id, TaskInstance.task_id == experiment,
        TaskInstance.map_index >= 0).order_by(TaskInstance.map_index).limit(MAX_TRIALS_SHOWN)).all()
    rows = session.scalars(select(XComModel).where(
        XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.task_id == experiment,
        XComModel.key == "return_value", XComModel.map_index.in_([index for index, _ in mapped]))).all()
    results = {row.map_index: XComModel.deserialize_value(row) for row in rows}
    reported = {t.get("trial"): t for t in summary.get("trials") or [] if isinstance(t, dict)}
    trials = []
    for index, state in mapped:
        result = results.get(index) if isinstance(results.get(index), dict) else {}
        listed = reported.get(index) or {}
        trials.append({"number": index, "state": str(getattr(state, "value", state) or "none"),
                       "value": listed.get("value"), "params": listed.get("params") or result.get("params") or {},
                       "job_name": listed.get("job_name") or result.get("job_name")})
    return {"sweep": experiment, "trials": trials, "best_trial": summary.get("best_trial"),
            "objective_metric": summary.get("metric"), "direction": summary.get("direction")}
