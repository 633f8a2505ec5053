"""Every YAML recipe in the recipes folder, as a DAG (one per recipe): ``[ml_training] recipes_folder``, else
the repository's ``recipes/`` beside this file's folder. A folder that does not exist is a warning on this
file in Airflow's UI (and in `airflow-ml check`), not a silence.

A recipe named ``x`` is the DAG ``recipe_x``: recipe DAGs never take another DAG file's id. A recipe
is validated while this file is parsed. An invalid one does not take the others down: it becomes a
DAG ``invalid_recipe_<file stem>`` whose task fails with the file's errors (file, line and field),
and a warning on this file; `airflow-ml validate recipes/*.yaml` catches the same errors in CI.
"""

from __future__ import annotations

from airflow_ml_provider.recipes.dag import dags_from_folder, recipes_folder

globals().update(dags_from_folder(recipes_folder(__file__)))
