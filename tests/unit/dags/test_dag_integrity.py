"""Every DAG in dags/ (including one per recipe in recipes/) loads. What parsing each file may import is
tests/unit/dags/test_parse_time_validation.py's (one process per file, so no file hides behind another's imports)."""

from __future__ import annotations

from airflow_ml_provider.recipes import load_recipe
from support import REPO


def test_every_dag_file_loads_without_import_errors(airflow_db):  # DagBag reads the metadata DB
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    recipes = {load_recipe(path).dag_id for path in (REPO / "recipes").glob("*.yaml")}
    assert {"ml_quickstart", "ml_training_pipeline"} | recipes <= set(bag.dag_ids)
    for dag_id in bag.dag_ids:
        assert bag.get_dag(dag_id).tags, f"{dag_id} has no tags"

