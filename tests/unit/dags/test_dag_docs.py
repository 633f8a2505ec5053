"""Every shipped DAG tells a person in the UI what it does: a description on its card, docs on its
page; the hand-written DAGs' Params have titles and descriptions for the trigger form."""

from __future__ import annotations

import runpy

import pytest

from support import REPO


@pytest.fixture(scope="module")
def dags(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    return {dag_id: bag.get_dag(dag_id) for dag_id in bag.dag_ids}


def test_every_shipped_dag_has_a_description_and_docs(dags):
    missing = [dag_id for dag_id, dag in dags.items() if not (dag.description and dag.doc_md)]
    assert missing == []


@pytest.mark.parametrize("name", ["ml_quickstart", "ml_training_pipeline"])
def test_params_have_titles_and_descriptions(name):
    dag = runpy.run_path(str(REPO / "dags" / f"{name}.py"))["dag"]
    assert dag.params, name
    untitled = [
        key for key, param in dag.params.items() if not (param.schema.get("title") and param.description)
    ]
    assert untitled == []
