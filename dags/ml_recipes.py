"""Every YAML recipe in the repository's ``recipes/`` folder, as a DAG (one per recipe).

A recipe named ``x`` is the DAG ``recipe_x``: recipe DAGs never take another DAG file's id. A recipe
is validated while this file is parsed. An invalid one does not take the others down: it becomes a
DAG ``invalid_recipe_<file stem>`` whose task fails with the file's errors (file, line and field),
and a warning on this file; `airflow-ml validate recipes/*.yaml` catches the same errors in CI.
"""

from __future__ import annotations

from pathlib import Path

from airflow_ml_provider.recipes.dag import dags_from_folder

globals().update(dags_from_folder(Path(__file__).resolve().parents[1] / "recipes"))
