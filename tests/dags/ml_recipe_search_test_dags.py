"""A recipe search DAG the integration tests run with dag.test(): choice values must stay argv data."""

from __future__ import annotations

from pathlib import Path

from airflow_ml_provider.recipes import dag_from_recipe

search_injection = dag_from_recipe(Path(__file__).resolve().parents[1] / "fixtures" / "recipes" / "search_injection.yaml")
xgboost_search = dag_from_recipe(Path(__file__).resolve().parents[1] / "fixtures" / "recipes" / "xgboost_search.yaml")
