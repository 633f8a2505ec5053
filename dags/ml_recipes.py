"""Every YAML recipe in the repository's ``recipes/`` folder, as a DAG (one per recipe).

A recipe is validated while this file is parsed: an invalid one fails here, naming the file,
line and field; `airflow-ml validate recipes/*.yaml` catches the same errors in CI first.
"""

from __future__ import annotations

from pathlib import Path

from airflow_ml_provider.recipes import dag_from_recipe

RECIPES = Path(__file__).resolve().parents[1] / "recipes"

for _path in sorted(RECIPES.glob("*.yaml")):
    _dag = dag_from_recipe(_path)
    globals()[_dag.dag_id] = _dag
