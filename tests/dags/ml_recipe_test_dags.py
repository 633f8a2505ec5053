"""A recipe DAG the integration tests run with dag.test(): hostile values must stay argv data."""

from __future__ import annotations

from pathlib import Path

from airflow_ml_provider.recipes import dag_from_recipe

injection = dag_from_recipe(Path(__file__).resolve().parents[1] / "fixtures" / "recipes" / "injection.yaml")
run_dir = dag_from_recipe(Path(__file__).resolve().parents[1] / "fixtures" / "recipes" / "run_dir.yaml")
