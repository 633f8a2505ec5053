"""Running the test DAGs for real with dag.test() and reading back what they recorded."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from support import TEST_DAGS


@dataclass
class DagRunResult:
    state: str
    run_id: str
    task_states: dict[str, str]
    xcom: dict[str, Any]


@cache
def _dags_in(path: Path) -> dict[str, Any]:
    from airflow.sdk import DAG

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {obj.dag_id: obj for obj in vars(module).values() if isinstance(obj, DAG)}


def _test_dag(dag_id: str) -> Any:
    """The DAG from whichever tests/dags file defines it; a file that fails to import only fails the
    tests that needed a DAG from it (its error is part of the message)."""
    errors = []
    for path in sorted(TEST_DAGS.glob("*.py")):
        try:
            dags = _dags_in(path)
        except Exception as exc:  # noqa: BLE001 (reported below if the DAG is not found elsewhere)
            errors.append(f"{path.name}: {type(exc).__name__}: {exc}")
            continue
        if dag_id in dags:
            return dags[dag_id]
    raise LookupError(f"no test DAG {dag_id!r} in {TEST_DAGS}" + "".join(f"\n  {error}" for error in errors))


@pytest.fixture(scope="session")
def test_dag():
    """``_test_dag`` for a fixture of a wider scope than ``run_dag``'s (a test module cannot import it: under
    xdist ``conftest`` may name another folder's)."""
    return _test_dag


@pytest.fixture
def run_dag(airflow_db):
    def run(dag_id: str) -> DagRunResult:
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session

        dag_run = _test_dag(dag_id).test()
        with create_session() as session:
            rows = session.query(XComModel).filter_by(dag_id=dag_id, run_id=dag_run.run_id, key="return_value")
            xcom = {row.task_id: row.value for row in rows}
            task_states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances(session=session)}
        return DagRunResult(str(dag_run.state), dag_run.run_id, task_states, xcom)

    return run
