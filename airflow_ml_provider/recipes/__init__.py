"""YAML recipes -> validated pipelines -> Airflow DAGs.

``dag_from_recipe`` is imported lazily: validating and rendering recipes (``airflow-ml validate``)
must work where Airflow is not installed.
"""

from airflow_ml_provider.recipes.loader import Issue, RecipeError, load_recipe, parse_recipe
from airflow_ml_provider.recipes.model import Experiment, Recipe, Trial

__all__ = [
    "Experiment", "Issue", "Recipe", "RecipeError", "Trial", "dag_from_recipe", "load_recipe", "parse_recipe",
]


def __getattr__(name: str):
    if name == "dag_from_recipe":
        from airflow_ml_provider.recipes.dag import dag_from_recipe

        return dag_from_recipe
    raise AttributeError(name)
