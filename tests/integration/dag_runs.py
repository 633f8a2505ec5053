"""Reading back what a dag.test() run recorded, per map index (helpers for the pipeline and recipe tests)."""

from __future__ import annotations

import runpy
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any


@dataclass
class RunRecord:
    state: str
    run_id: str
    states: dict[tuple[str, int], str]  # (task_id, map_index) -> state
    xcom: dict[tuple[str, int, str], Any]  # (task_id, map_index, key) -> value

    def value(self, task_id: str, key: str = "return_value") -> Any:
        return self.xcom.get((task_id, -1, key))

    def mapped(self, task_id: str) -> list[Any]:
        """The mapped task's return values, in map index order."""
        return [
            v
            for (t, _, k), v in sorted(self.xcom.items(), key=lambda i: i[0][1])
            if t == task_id and k == "return_value"
        ]


def load_dag(path: Path, name: str = "dag"):
    return runpy.run_path(str(path))[name]


def record(dag_id: str, run_id: str, state: str) -> RunRecord:
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        dag_run = session.query(DagRun).filter_by(dag_id=dag_id, run_id=run_id).one()
        states = {
            (ti.task_id, ti.map_index): str(ti.state) for ti in dag_run.get_task_instances(session=session)
        }
        rows = session.query(XComModel).filter_by(dag_id=dag_id, run_id=run_id)
        xcom = {(row.task_id, row.map_index, row.key): row.value for row in rows}
    return RunRecord(state, run_id, states, xcom)


def run(dag, conf: dict[str, Any] | None = None, logical_date: datetime | None = None) -> RunRecord:
    """One dag.test() run; the same ``logical_date`` twice re-runs the same DAG run (same run_id, which
    a manual run derives from its ``run_after``)."""
    kwargs = {"logical_date": logical_date, "run_after": logical_date} if logical_date else {}
    dag_run = dag.test(run_conf=conf, **kwargs)
    return record(dag.dag_id, dag_run.run_id, str(dag_run.state))


def run_tasks(dag_run, session, run_task) -> None:
    """Run an existing DAG run's tasks until the run ends, scheduled as the scheduler would schedule them
    (``dag_run.dag`` set to its serialized DAG); ``run_task(ti)`` runs one task instance."""
    from airflow.utils.state import DagRunState, TaskInstanceState

    while dag_run.state == DagRunState.RUNNING:
        session.expire_all()
        for ti in dag_run.update_state(session=session)[0]:
            ti.try_number += 1
            ti.state = TaskInstanceState.SCHEDULED
        session.commit()
        for ti in dag_run.get_task_instances(state=[TaskInstanceState.SCHEDULED], session=session):
            run_task(ti)
