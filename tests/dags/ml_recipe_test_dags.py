"""Recipe DAGs the integration tests run with dag.test(): hostile values stay argv data, {{run_dir}} is the
run's folder, Params reach the trials and a sweep reports its best trial."""

from __future__ import annotations

from pathlib import Path

from airflow_ml_provider.recipes import dag_from_recipe

injection = dag_from_recipe(Path(__file__).resolve().parents[1] / "fixtures" / "recipes" / "injection.yaml")
run_dir = dag_from_recipe(Path(__file__).resolve().parents[1] / "fixtures" / "recipes" / "run_dir.yaml")
params_best = dag_from_recipe(Path(__file__).resolve().parents[1] / "fixtures" / "recipes" / "params_best.yaml")
