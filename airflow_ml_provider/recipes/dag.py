"""``dag_from_recipe``: a recipe's experiments as DAG tasks, each sample one mapped task instance."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import logging
import re
import sys
import time
import warnings
from collections.abc import Callable, Container, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, BaseOperator, Param
from airflow.sdk.exceptions import AirflowFailException

from airflow_ml_provider.operators.recipe import RecipeBestTrialOperator, RecipeTrialOperator
from airflow_ml_provider.patterns import bounded
from airflow_ml_provider.recipes import cache
from airflow_ml_provider.recipes.budgets import Budgets, Clock
from airflow_ml_provider.recipes.docs import recipe_doc_md
from airflow_ml_provider.recipes.loader import (
    Issue,
    RecipeError,
    budget_problems,
    parse_recipe,
    read_recipe_text,
)
from airflow_ml_provider.recipes.model import INVALID_DAG_ID_PREFIX, Recipe, RecipeParam
from airflow_ml_provider.recipes.safe_yaml import format_path
from airflow_ml_provider.recipes.search import search_operator

log = logging.getLogger(__name__)


def dag_from_recipe(path: str | Path, **dag_kwargs: Any) -> DAG:
    """Build the DAG of a recipe file (validated first; an invalid recipe raises RecipeError).

    A relative ``path`` is looked up from the calling DAG file's folder, then its parent (so a
    ``dags/`` file finds ``recipes/`` beside it): inside the DAG's own bundle, never the working directory.
    ``dag_kwargs`` go to ``DAG`` (for example ``default_args``) and override what the recipe sets.
    """
    recipe_path = _resolve(Path(path), Path(sys._getframe(1).f_globals.get("__file__", ".")).resolve().parent)
    budgets = Budgets.from_config()
    clock = Clock(budgets)
    recipe, payloads = load_for_dag(recipe_path, budgets, clock)
    return build_dag(recipe, str(recipe_path), budgets=budgets, clock=clock, payloads=payloads, **dag_kwargs)


def load_for_dag(path: Path, budgets: Budgets, clock: Clock | None = None,
                 admit: Callable[[Recipe], None] = lambda recipe: None) -> tuple[Recipe, dict[str, list[str]]]:
    """The validated recipe and each mapped experiment's trial payloads: from the cache when this exact text
    was validated before (the file rules apply at every read), else validated and sampled, then cached.
    ``admit`` may refuse the recipe (raise) before any trial is sampled."""
    text = read_recipe_text(path)
    entry_key = cache.key(text)
    if (entry := cache.load(entry_key)) is not None:
        with contextlib.suppress(ValueError):  # an entry that is not a valid recipe any more: validate again
            recipe = Recipe.model_validate(entry["recipe"])
            if set(entry["trials"]) == {n for n, e in recipe.experiments.items() if e.search is None}:
                _refuse_over_budget(recipe, budgets, str(path))
                admit(recipe)
                return recipe, entry["trials"]
    recipe = parse_recipe(text, str(path), budgets)
    admit(recipe)
    payloads = {}
    for name, experiment in recipe.experiments.items():
        if experiment.search is None:
            _check(clock, str(path), name)
            payloads[name] = trial_payloads(recipe, name)
    cache.store(entry_key, {"recipe": recipe.model_dump(mode="json"), "trials": payloads})
    return recipe, payloads


def trial_payloads(recipe: Recipe, name: str) -> list[str]:
    """One JSON text per trial, what the experiment's task maps over (see RecipeTrialOperator)."""
    return [json.dumps({"params": t.params, "argv": t.argv}) for t in recipe.trials(name)]


def _refuse_over_budget(recipe: Recipe, budgets: Budgets, source: str) -> None:
    if over := budget_problems(recipe, budgets):
        raise RecipeError(source, [Issue(1, format_path(list(loc)), message) for loc, message in over])


def _check(clock: Clock | None, source: str, experiment: str) -> None:
    if clock is not None and (spent := clock.over()):
        raise RecipeError(source, [Issue(1, f"experiments.{experiment}", spent)])


def build_dag(recipe: Recipe, source: str = "<recipe>", *, budgets: Budgets | None = None, clock: Clock | None = None,
              payloads: dict[str, list[str]] | None = None, **dag_kwargs: Any) -> DAG:
    """The recipe's DAG, refused (RecipeError) before any trial is expanded if the recipe is over a job budget,
    and between experiments once ``clock`` says the file's parse time is spent. ``payloads``: each mapped
    experiment's trials as ``load_for_dag`` returns them (by default sampled here)."""
    _refuse_over_budget(recipe, budgets or Budgets.from_config(), source)
    settings = {
        "dag_id": recipe.dag_id,
        "description": recipe.description or f"Recipe {source}",
        "schedule": recipe.schedule,
        "catchup": False,
        "tags": ["ml", "recipe", *recipe.tags],
        "doc_md": recipe_doc_md(recipe, source),
        "params": {name: airflow_param(name, param) for name, param in recipe.params.items()},
        **dag_kwargs,
    }
    with DAG(**settings) as dag, _collector_paused():
        try:
            _add_tasks(recipe, source, clock, payloads or {})
        except BaseException:
            dag.auto_register = False  # half built: Airflow must not pick it up beside the file's placeholder
            raise
    return dag


def _add_tasks(recipe: Recipe, source: str, clock: Clock | None, payloads: dict[str, list[str]]) -> None:
    """The experiments as tasks of the DAG being defined, stopped between experiments once ``clock`` is spent."""
    tasks = {}
    for name, experiment in recipe.experiments.items():
        _check(clock, source, name)
        if experiment.search is not None:
            tasks[name] = search_operator(recipe, name, experiment)
            continue
        tasks[name] = RecipeTrialOperator.partial(
            task_id=name,
            framework=experiment.job_framework.value,
            num_workers=experiment.workers,
            job={"image": experiment.image, "env": experiment.env, "backend": experiment.backend or recipe.backend,
                 "resources": experiment.hardware.resources().model_dump(exclude_defaults=True),
                 "kubernetes": experiment.kubernetes.options().model_dump(exclude_defaults=True)},
            retries=experiment.retries,
            max_active_tis_per_dagrun=experiment.parallel,
            map_index_template="{{ task.trial_label }}",
        ).expand(trial=payloads[name] if name in payloads else trial_payloads(recipe, name))
        if experiment.best is not None:  # an experiment name has no '.': never another task's id
            tasks[name] >> RecipeBestTrialOperator(task_id=f"{name}.best", experiment=name,
                                                   metric=experiment.best.metric, direction=experiment.best.direction)
    for name, experiment in recipe.experiments.items():
        for dependency in experiment.depends_on:
            tasks[dependency] >> tasks[name]


def airflow_param(name: str, param: RecipeParam) -> Param:
    """A recipe Param as the trigger form shows it and the server checks it: type, bounds, choices, length.
    Bounds sit in an ``allOf`` entry, so a value outside them is refused quoting the Param's words (the
    form would clamp a top-level minimum/maximum silently); a ``number`` also takes null, so NaN (null
    after JSON) reaches the first task, which refuses it naming the Param."""
    title = param.title or name
    schema: dict[str, Any] = {"type": ["null", "number"] if param.type == "number" else param.type, "title": title}
    if param.description:
        schema["description"] = param.description
    if param.enum is not None:
        schema["enum"] = list(param.enum)
    if param.type == "string":
        schema["maxLength"] = param.max_length
    if param.minimum is not None:
        whole = param.type == "integer"
        low, high = (int(param.minimum), int(param.maximum)) if whole else (param.minimum, param.maximum)
        words = f"{'a whole number' if whole else 'a number'} from {low} to {high}."
        try:
            schema["allOf"] = bounded(f"{title}: {words}", minimum=low, maximum=high)
        except ValueError:  # a long title: the bounds alone (the title is the field's label anyway)
            schema["allOf"] = bounded(words.capitalize(), minimum=low, maximum=high)
    return Param(param.default, **schema)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause CPython's cyclic garbage collector while a DAG is built. Thousands of trials allocate
    enough objects to trigger full collections, each rescanning all of Airflow's heap: most of a large
    recipe's parse time. Those objects are not garbage, and collection resumes right after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class RecipeWarning(UserWarning):
    """A recipe file that could not become its DAG (Airflow shows a DAG file's warnings in the UI)."""


class InvalidRecipeOperator(BaseOperator):
    """Stands in for a recipe file that does not load: running it fails with that file's errors.

    Args:
        errors: the file's errors, as the task's failure message.
    """

    ui_color = "#f4a6a6"

    def __init__(self, *, errors: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.errors = errors

    def execute(self, context: Any) -> None:
        raise AirflowFailException(self.errors)


def recipes_folder(dag_file: str | Path) -> Path:
    """Where a DAG file's recipes are: ``[ml_training] recipes_folder`` (absolute, or relative to the DAG
    file's folder), else ``recipes/`` beside that folder (the repository's layout: ``dags/``, ``recipes/``)."""
    from airflow.sdk import conf

    here = Path(dag_file).resolve().parent
    configured = conf.get("ml_training", "recipes_folder", fallback="")
    return here / configured if configured else here.parent / "recipes"


def dags_from_folder(folder: str | Path, **dag_kwargs: Any) -> dict[str, DAG]:
    """One DAG per ``*.yaml`` recipe in ``folder``, keyed by DAG id (``recipe_<name>``). A folder that does
    not exist gives none, with a RecipeWarning on the DAG file (Airflow shows it): never silently.

    A file that fails to load (invalid, unreadable, or reusing another recipe's name) never takes the
    others down: it becomes a DAG ``invalid_recipe_<file stem>`` whose one task fails with the file's
    errors (also raised as a RecipeWarning, which the DAG processor records for the DAG file). The two
    prefixes keep recipe DAGs apart from every other DAG file's ids and from each other: a placeholder
    never replaces a recipe's DAG, and of two recipes with one name the first file (by name) keeps it.
    """
    if not Path(folder).is_dir():
        warnings.warn(f"no recipes: the recipes folder {folder} is not a folder (set [ml_training] recipes_folder)",
                      RecipeWarning, stacklevel=2)
        return {}
    dags: dict[str, DAG] = {}
    files: dict[str, Path] = {}  # DAG id -> the recipe file that holds it
    budgets = Budgets.from_config()
    deadline = time.monotonic() + budgets.folder_parse_seconds if budgets.folder_parse_seconds else None
    jobs = 0  # in the recipes loaded so far
    for path in sorted(Path(folder).glob("*.yaml")):
        clock = Clock(budgets, deadline)
        def admit(recipe: Recipe, path: Path = path) -> None:
            if recipe.dag_id in files:
                raise RecipeError(str(path), [Issue(1, "name", f"the DAG id {recipe.dag_id!r} is already the "
                                                                f"recipe {files[recipe.dag_id].name}'s")])
            if jobs + recipe.num_jobs > budgets.max_jobs_per_folder:
                raise RecipeError(str(path), [Issue(1, "experiments", (
                    f"its {recipe.num_jobs} jobs would bring the recipes folder to {jobs + recipe.num_jobs}, over "
                    f"the budget of {budgets.max_jobs_per_folder} ({Budgets.key('max_jobs_per_folder')})"))])

        try:
            if spent := clock.over():
                raise RecipeError(str(path), [Issue(1, "", spent)])
            recipe, payloads = load_for_dag(path, budgets, clock, admit)
            dag = build_dag(recipe, str(path), budgets=budgets, clock=clock, payloads=payloads, **dag_kwargs)
            jobs += recipe.num_jobs
        except Exception as exc:  # noqa: BLE001 (one bad file must not hide every other recipe's DAG)
            errors = _refusal(path, exc)
            warnings.warn(f"recipe not loaded: {errors}", RecipeWarning, stacklevel=2)
            dag = invalid_recipe_dag(path, errors, taken=files)
        dags[dag.dag_id], files[dag.dag_id] = dag, path
    return dags


def _refusal(path: Path, exc: Exception) -> str:
    """What the placeholder DAG and the warning say: paths and rules, never the file's content."""
    if isinstance(exc, RecipeError):
        return str(exc)
    if isinstance(exc, OSError):
        return f"{path}: cannot be read: {exc.strerror or type(exc).__name__}"
    log.warning("recipe %s: building its DAG failed", path, exc_info=True)  # the DAG processor's log only
    return f"{path}: {type(exc).__name__} while building its DAG (details in the DAG processor's log)"


def invalid_recipe_dag(path: Path, errors: str, taken: Container[str] = ()) -> DAG:
    """A DAG named after the file, that fails at once with its errors (shown as code, never as markup).
    Its id is never one in ``taken``: two stems that read the same (``a b``, ``a_b``) get the file
    name's digest appended."""
    dag_id = INVALID_DAG_ID_PREFIX + re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem)[:180]
    if dag_id in taken:
        dag_id += "_" + hashlib.sha256(path.name.encode(errors="surrogateescape")).hexdigest()[:12]
    shown = "\n".join(f"    {line}" for line in errors.splitlines())
    with DAG(dag_id, schedule=None, catchup=False, tags=["ml", "recipe", "invalid"],
             description=f"INVALID RECIPE {path.name}: fix it (airflow-ml validate) to get its DAG",
             doc_md=f"This recipe file does not load:\n\n{shown}\n") as dag:
        InvalidRecipeOperator(task_id="invalid_recipe", errors=errors)
    return dag


def _resolve(path: Path, caller_dir: Path) -> Path:
    if path.is_absolute():
        return path
    # never the process's working directory: a DAG bundle version checked out elsewhere reads its own recipes
    candidates = [caller_dir / path, caller_dir.parent / path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    looked = ", ".join(str(candidate.parent) for candidate in candidates)
    raise FileNotFoundError(f"recipe {path} not found; looked in: {looked}")
