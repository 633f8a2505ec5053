"""Recipe files in a check: validated as ``airflow-ml validate`` does (a case per error, at its line),
then every trial's job built and rendered for the backend it would run on."""

from __future__ import annotations

from pathlib import Path

from airflow_ml_provider.ci.results import Case, relative
from airflow_ml_provider.ci.targets import Targets
from airflow_ml_provider.recipes import RecipeError, load_recipe
from airflow_ml_provider.recipes.budgets import Budgets
from airflow_ml_provider.recipes.render import trial_jobs

RUN_ID = "check"


def check_recipe(path: Path, targets: Targets) -> list[Case]:
    file = relative(str(path))
    try:
        recipe = load_recipe(path, Budgets.from_config())
    except RecipeError as exc:
        return [Case(file, issue.path or "recipe", file, issue.line, "failed", issue.message) for issue in exc.issues]
    except OSError as exc:
        return [Case(file, "recipe", file, 1, "failed", f"cannot be read: {exc.strerror or type(exc).__name__}")]
    cases = []
    for name, experiment in recipe.experiments.items():
        case = Case(file, name, file, 1)
        try:
            backend = targets.backend(targets.name(experiment.backend or recipe.backend))
            for _, identity, spec in trial_jobs(recipe, name, backend, RUN_ID):
                spec = targets.with_image(backend, spec)  # a recipe names an image only to pick one of these
                case.details += targets.check(backend, identity.name, spec, identity.labels())
        except Exception as exc:  # noqa: BLE001 - the backend's or the server's refusal is the finding
            case.status, case.message = "failed", " ".join(str(exc).split()) or type(exc).__name__
        cases.append(case)
    return cases


def is_recipe(path: Path) -> bool:
    return path.suffix in (".yaml", ".yml")
