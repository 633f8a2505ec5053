"""The training view's FastAPI app (mounted at ``/ml-training`` by the provider's plugin), built on its first
request: the API server's start pays for importing this module only. Its routes are behind Airflow's own
authentication (a session cookie or a bearer token; none: 401) and the DAG's read permission on task instances
(none: 403), which a plugin's routes do not get by default."""

from __future__ import annotations

import re
from typing import Any

from airflow_ml_provider import xcom_keys
from airflow_ml_provider.plugins.search_trials import is_search, live_trials, one_trial
from airflow_ml_provider.plugins.sweep_trials import is_sweep_best, sweep_trials
from airflow_ml_provider.plugins.training_view import gate_targets, page
from airflow_ml_provider.plugins.trial_view import trial_page

RESULT_KEY = "return_value"
# Nothing on the page runs: no script at all, styles inline only (the escaping's second line of defence).
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; frame-ancestors 'self'"
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff"}


def read(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> dict[str, Any] | None:
    """What the view shows of a task instance, from the metadata database; None when there is no such one."""
    from airflow.models.dagrun import DagRun
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        ti = _task_instance(session, dag_id, run_id, task_id, map_index)
        if ti is None:
            return None
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        rows = session.scalars(select(XComModel).where(
            XComModel.dag_id == dag_id, XComModel.run_id == run_id,
            XComModel.key.in_([xcom_keys.TRAINING_VIEW, xcom_keys.FOLLOW_STATE, RESULT_KEY, xcom_keys.TENSORBOARD_DIR]))).all()
        values = {(row.task_id, row.map_index, row.key): XComModel.deserialize_value(row) for row in rows}
        serialized = SerializedDagModel.get(dag_id, session=session)
        targets = gate_targets(serialized.dag, (run.conf if run else None) or {}) if serialized else {}
        task = serialized.dag.task_dict.get(task_id) if serialized else None
        own = (task_id, map_index)
        result = values.get((*own, RESULT_KEY))
        # a recipe sweep's ``.best``: the sweep's mapped task instances, with what it reported of them
        sweep = sweep_trials(session, task, dag_id, run_id, result) if is_sweep_best(task) else None
    view = values.get((*own, xcom_keys.TRAINING_VIEW)) or _from_follow_state(values.get((*own, xcom_keys.FOLLOW_STATE)))
    # a search's trials: its summary once it ended, its study's so far while it runs; no other task's result
    search = (result if isinstance(result, dict) else live_trials(task, dag_id, task_id, run_id, map_index)) \
        if is_search(task) else sweep
    links = [(f"MLflow{what} ({task}{'' if index < 0 else f'[{index}]'})", value.get(field))
             for (task, index, key), value in sorted(values.items()) if key == RESULT_KEY and isinstance(value, dict)
             for field, what in (("url", ""), ("artifacts_url", " artifacts")) if value.get(field)]
    result = result if isinstance(result, dict) else None
    return {"ti": ti, "view": view, "result": result, "search": search, "targets": targets, "links": links,
            "tensorboard": _tensorboard(values.get((*own, xcom_keys.TENSORBOARD_DIR)) or view.get("tensorboard_dir")
                                        or (result or {}).get("tensorboard_dir"))}


def read_trial(dag_id: str, run_id: str, task_id: str, map_index: int, number: int) -> dict[str, Any] | None:
    """What a search trial's page shows, from the metadata database (the view the search saved of the trial's job,
    its summary once it ended) and the search's study (the trial's objective per step); None when there is no
    such search task instance."""
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        ti = _task_instance(session, dag_id, run_id, task_id, map_index)
        serialized = SerializedDagModel.get(dag_id, session=session) if ti is not None else None
        task = serialized.dag.task_dict.get(task_id) if serialized else None
        if task is None or not is_search(task):
            return None
        rows = session.scalars(select(XComModel).where(
            XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.task_id == task_id,
            XComModel.map_index == map_index, XComModel.key.in_([RESULT_KEY, xcom_keys.trial_view(number)]))).all()
        values = {row.key: XComModel.deserialize_value(row) for row in rows}
    result = values.get(RESULT_KEY) if isinstance(values.get(RESULT_KEY), dict) else {}
    listed = next((t for t in result.get("trials") or [] if isinstance(t, dict) and t.get("number") == number), None)
    stored = one_trial(task, dag_id, task_id, run_id, map_index, number) or {}
    trial = {**(listed or {}), **stored} if "note" not in stored or listed is None else {**listed, "note": stored["note"]}
    view = values.get(xcom_keys.trial_view(number))
    view = view if isinstance(view, dict) else {}
    # the objective as the search recorded it: in its summary, else in its study (a recipe search's serialized task
    # has no settings: no template fields)
    objective = {key: result.get(key) or stored.get(key) for key in ("objective_metric", "direction")}
    url = (listed or {}).get("mlflow_url") or stored.get("search_mlflow_url")
    links = [(f"MLflow (trial {number})" if (listed or {}).get("mlflow_url") else "MLflow (the search's run)", url)]
    return {"ti": ti, "number": number, "trial": trial, "view": view, "best": result.get("best_trial") == number if result else False,
            "objective": objective,
            "links": links if url else [], "targets": {},
            "view_note": None if view else "No view of its job was saved (a trial that never started, or one an "
                                           "earlier try of the search task ran: a new try clears its XComs).",
            "tensorboard": _tensorboard(view.get("tensorboard_dir"))}


def _task_instance(session, dag_id: str, run_id: str, task_id: str, map_index: int) -> dict[str, Any] | None:
    """The task instance as the pages name it (its keys and state), None when there is no such one."""
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    ti = session.scalar(select(TaskInstance).where(
        TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id, TaskInstance.task_id == task_id,
        TaskInstance.map_index == map_index))
    if ti is None:
        return None
    state = str(ti.state.value if hasattr(ti.state, "value") else ti.state)
    return {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index, "state": state}


def _tensorboard(logdir: Any) -> dict[str, Any] | None:
    """The job's TensorBoard scalars, from the directory the task recorded (its XCom), never one a request names."""
    if not isinstance(logdir, str) or not logdir:
        return None
    from airflow_ml_provider.plugins.tensorboard_scalars import read_scalars

    try:
        return read_scalars(logdir)
    except ModuleNotFoundError as exc:
        return {"dir": logdir, "runs": {},
                "note": f"not read: {exc.name} is not installed here (airflow-ml-provider[tensorboard])"}
    except Exception as exc:  # noqa: BLE001 - a job's damaged event file must not break the page
        return {"dir": logdir, "runs": {}, "note": f"not read: {type(exc).__name__}"}


def _from_follow_state(state: Any) -> dict[str, Any]:
    """A deferred task's view: the follow core's durable state, as its trigger saved it."""
    if not isinstance(state, dict):
        return {}
    tracked = state.get("metrics") or {}
    return {"metrics": tracked.get("metrics") or {}, "others": tracked.get("others") or {},
            "resources": tracked.get("resources"),
            "tail": (state.get("tail") or [])[-20:], "state": (state.get("shown") or [None])[0],
            "preemptions": state.get("preemptions", 0)}


def make_app():
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag
    from fastapi import Depends, FastAPI, HTTPException
    from fastapi.responses import HTMLResponse

    app = FastAPI(title="ML Training view", docs_url=None, redoc_url=None, openapi_url=None)
    may_read = [Depends(requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE))]

    def found(dag_id: str, run_id: str, task_id: str, map_index: str) -> dict[str, Any]:
        data = read(dag_id, run_id, task_id, _index(map_index))
        if data is None:
            raise HTTPException(404, f"no task instance {dag_id}/{run_id}/{task_id}[{map_index}]")
        return data

    @app.get("/ti/{dag_id}/{run_id}/{task_id}", response_class=HTMLResponse, dependencies=may_read)
    def view_page(dag_id: str, run_id: str, task_id: str, map_index: str = "-1") -> HTMLResponse:
        return HTMLResponse(page(found(dag_id, run_id, task_id, map_index)), headers=HEADERS)

    @app.get("/api/ti/{dag_id}/{run_id}/{task_id}", dependencies=may_read)
    def view_data(dag_id: str, run_id: str, task_id: str, map_index: str = "-1") -> dict[str, Any]:
        return found(dag_id, run_id, task_id, map_index)

    def found_trial(dag_id: str, run_id: str, task_id: str, number: str, map_index: str) -> dict[str, Any]:
        data = read_trial(dag_id, run_id, task_id, _index(map_index), int(number)) \
            if re.fullmatch(r"[0-9]{1,9}", number) else None
        if data is None:
            raise HTTPException(404, f"no trial {number} of a search task instance {dag_id}/{run_id}/{task_id}")
        return data

    @app.get("/trial/{dag_id}/{run_id}/{task_id}/{number}", response_class=HTMLResponse, dependencies=may_read)
    def trial_view_page(dag_id: str, run_id: str, task_id: str, number: str, map_index: str = "-1") -> HTMLResponse:
        return HTMLResponse(trial_page(found_trial(dag_id, run_id, task_id, number, map_index)), headers=HEADERS)

    @app.get("/api/trial/{dag_id}/{run_id}/{task_id}/{number}", dependencies=may_read)
    def trial_view_data(dag_id: str, run_id: str, task_id: str, number: str, map_index: str = "-1") -> dict[str, Any]:
        return found_trial(dag_id, run_id, task_id, number, map_index)

    return app


def _index(map_index: str) -> int:
    """An unmapped task's tab comes with "{MAP_INDEX}" left as it is (Airflow's UI fills in only a mapped one's)."""
    return int(map_index) if re.fullmatch(r"-?[0-9]{1,9}", map_index) else -1


class LazyApp:
    """An ASGI app that builds ``make_app()`` on its first request."""

    def __init__(self):
        self.app = None

    async def __call__(self, scope, receive, send):
        if self.app is None:
            self.app = make_app()
        await self.app(scope, receive, send)
