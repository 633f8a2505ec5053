"""A recipe DAG's documentation page (``doc_md``), from the recipe's description and experiments.

A recipe author is not trusted: every value taken from the recipe is shown as text (Markdown's special
characters escaped, one line), so a description can neither link nor format anything in the UI.
"""

from __future__ import annotations

import re

from airflow_ml_provider.recipes.model import Experiment, RangeSpec, Recipe

_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!<>|~&])")
_MAX_SHOWN = 200  # characters of one value; a recipe file is bounded, this keeps a page readable


def text(value: object) -> str:
    """``value`` as literal Markdown text on one line (special characters escaped, long values cut)."""
    shown = " ".join(str(value).split())
    if len(shown) > _MAX_SHOWN:
        shown = shown[:_MAX_SHOWN] + "..."
    return _SPECIAL.sub(r"\\\1", shown)


def recipe_doc_md(recipe: Recipe, source: str) -> str:
    """The description, then one row per experiment: framework, workers, trials, dependencies, parameters."""
    rows = [f"| {text(name)} | {_how(e)} | {e.workers} | {_trials(e)} | {text(', '.join(e.depends_on)) or '-'} | "
            f"{_parameters(e)} |" for name, e in recipe.experiments.items()]
    return "\n".join([
        text(recipe.description) or "A recipe without a description.", "",
        f"Generated from the recipe file {text(source)} by `airflow_ml_provider.recipes.dag_from_recipe`: "
        f"{recipe.num_jobs} job(s) per run.", "",
        "| Experiment | Framework | Workers per job | Trials | After | Parameters |",
        "|---|---|---|---|---|---|",
        *rows,
        *_params(recipe),
        *_best(recipe),
    ]) + "\n"


def _params(recipe: Recipe) -> list[str]:
    """The Params a person may set in the trigger form, with what each takes."""
    if not recipe.params:
        return []
    def allowed(param) -> str:
        if param.enum is not None:
            return " or ".join(text(v) for v in param.enum)
        if param.minimum is not None:
            return f"{param.minimum:g} to {param.maximum:g}"
        return f"up to {param.max_length} characters" if param.type == "string" else "true or false"

    return ["", "Params (the trigger form; commands use them as `{{params.<name>}}`):", "",
            "| Param | Type | Default | Allowed | Description |", "|---|---|---|---|---|",
            *(f"| {text(name)} | {p.type} | {text(p.default)} | {allowed(p)} | {text(p.description) or '-'} |"
              for name, p in recipe.params.items())]


def _best(recipe: Recipe) -> list[str]:
    best = [(name, e.best) for name, e in recipe.experiments.items() if e.best is not None]
    return ["", *(f"The task {text(name)}\\.best reports the best trial of {text(name)} by {text(b.metric)} "
                  f"({b.direction}): in its log, its XCom and an MLflow run." for name, b in best)] if best else []


def _how(experiment: Experiment) -> str:
    return experiment.job_framework.value if experiment.image is None else f"image {text(experiment.image)}"


def _trials(experiment: Experiment) -> str:
    if experiment.search is not None:
        return f"{experiment.num_samples} ({text(experiment.search.sampler)} search)"
    return str(experiment.num_samples)


def _parameters(experiment: Experiment) -> str:
    def spec(value: object) -> str:
        if isinstance(value, RangeSpec):
            return f"{value.min:g} to {value.max:g}" + (" (log)" if value.scale == "log" else "")
        if isinstance(value, list):
            return " or ".join(text(v) for v in value)
        return text(value)

    return "; ".join(f"{text(name)}: {spec(value)}" for name, value in experiment.parameters.items()) or "-"
