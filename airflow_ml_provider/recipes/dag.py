"""``dag_from_recipe``: a recipe's experiments as DAG tasks, each sample one mapped task instance."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from airflow_ml_provider.operators.recipe import RecipeTrialOperator
from airflow_ml_provider.recipes.loader import load_recipe
from airflow_ml_provider.recipes.model import Recipe
from airflow_ml_provider.recipes.search import search_operator


def dag_from_recipe(path: str | Path, **dag_kwargs: Any) -> DAG:
    """Build the DAG of a recipe file (validated first; an invalid recipe raises RecipeError).

    A relative ``path`` is looked up from the calling DAG file's folder, then its parent (so a
    ``dags/`` file finds ``recipes/`` beside it), then the working directory. ``dag_kwargs`` go to
    ``DAG`` (for example ``default_args``) and override what the recipe sets.
    """
    recipe_path = _resolve(Path(path), Path(sys._getframe(1).f_globals.get("__file__", ".")).resolve().parent)
    return build_dag(load_recipe(recipe_path), str(recipe_path), **dag_kwargs)


def build_dag(recipe: Recipe, source: str = "<recipe>", **dag_kwargs: Any) -> DAG:
    settings = {
        "dag_id": recipe.name,
        "description": recipe.description or f"Recipe {source}",
        "schedule": recipe.schedule,
        "catchup": False,
        "tags": ["ml", "recipe", *recipe.tags],
        "doc_md": f"Generated from the recipe `{source}` by `airflow_ml_provider.recipes.dag_from_recipe`.",
        **dag_kwargs,
    }
    with DAG(**settings) as dag:
        tasks = {}
        for name, experiment in recipe.experiments.items():
            if experiment.search is not None:
                tasks[name] = search_operator(recipe, name, experiment)
                continue
            tasks[name] = RecipeTrialOperator.partial(
                task_id=name,
                framework=experiment.job_framework.value,
                num_workers=experiment.workers,
                image=experiment.image,
                hardware=experiment.hardware.resources().model_dump(exclude_defaults=True),
                env=experiment.env,
                backend=experiment.backend or recipe.backend,
                retries=experiment.retries,
                max_active_tis_per_dagrun=experiment.parallel,
                map_index_template="{{ task.trial_label }}",
            ).expand(trial=[json.dumps({"params": t.params, "argv": t.argv}) for t in recipe.trials(name)])
        for name, experiment in recipe.experiments.items():
            for dependency in experiment.depends_on:
                tasks[dependency] >> tasks[name]
    return dag


def _resolve(path: Path, caller_dir: Path) -> Path:
    if path.is_absolute():
        return path
    candidates = [caller_dir / path, caller_dir.parent / path, Path.cwd() / path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    looked = ", ".join(str(candidate.parent) for candidate in candidates)
    raise FileNotFoundError(f"recipe {path} not found; looked in: {looked}")
