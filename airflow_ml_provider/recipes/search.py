"""A recipe experiment with a ``search:`` section becomes one HyperparameterSearchOperator task.

Its ``parameters`` become the search space (lists: categorical; ranges: float/int, log scale kept),
single values stay constants of the command, ``samples`` is the trial budget and ``parallel`` the
number of trials at once. Everything stays data: ``{{name}}`` of a searched parameter becomes the
search's placeholder, the trial spec is passed as a TrainingJobSpec (never templated), and the task is
a RecipeSearchOperator, which has no template fields, so no choice value, objective or other recipe
text ever reaches Airflow's Jinja (where ``var`` and ``conn`` are in the context).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.operators.recipe import check_image, checked_params, fill_at_run
from airflow_ml_provider.operators.search import HyperparameterSearchOperator
from airflow_ml_provider.recipes.argv import PLACEHOLDER, as_text
from airflow_ml_provider.recipes.model import PARAMS_PREFIX, Experiment, RangeSpec, Recipe
from airflow_ml_provider.search.space import SearchSettings
from airflow_ml_provider.search.template import placeholder


def search_space(experiment: Experiment) -> dict[str, Any]:
    """The searched parameters (everything but single values) in the search operator's format."""
    space = {}
    for name, spec in experiment.parameters.items():
        if isinstance(spec, RangeSpec):
            low, high = (int(spec.min), int(spec.max)) if spec.type == "int" else (spec.min, spec.max)
            space[name] = {"type": spec.type, "low": low, "high": high, "log": spec.scale == "log"}
        elif len(spec) > 1:
            space[name] = list(spec)
    return space


def trial_spec(name: str, experiment: Experiment) -> TrainingJobSpec:
    """The experiment's job with searched parameters as placeholders and constants filled in."""
    searched = search_space(experiment)
    constants = {"experiment": name, **{n: v[0] for n, v in experiment.parameters.items() if n not in searched}}

    def fill(match) -> str:
        ref = match.group(1)
        if ref.startswith(PARAMS_PREFIX):  # the run's Param value, filled in by the search task
            return "{{" + ref + "}}"
        return placeholder(ref) if ref in searched else as_text(constants[ref])

    return TrainingJobSpec(
        framework=experiment.job_framework, num_workers=experiment.workers, image=experiment.image,
        resources=experiment.hardware.resources(), env=experiment.env, kubernetes=experiment.kubernetes.options(),
        command=[PLACEHOLDER.sub(fill, argument) for argument in experiment.command],
    )


class RecipeSearchOperator(HyperparameterSearchOperator):
    """A search built from a recipe: every argument is recipe data, none is an Airflow template. The trial's
    ``{{params.<name>}}`` are the run's Param values, checked first (see ``operators.recipe.checked_params``).

    Args:
        trial, search_space, search, backend, storage_url, mlflow_experiment, track_mlflow, registry_conn_id,
        ml_conn_id, deferrable: see :class:`~airflow_ml_provider.operators.search.HyperparameterSearchOperator`.
    """

    template_fields: Sequence[str] = ()

    def execute(self, context) -> dict[str, Any]:
        check_image(self.task_id, self.trial.image, self.backend, self.ml_conn_id)
        self._param_values = checked_params(context)
        return super().execute(context)

    def _render_trial(self, context, space):
        spec = super()._render_trial(context, space)
        return spec.model_copy(update={"command": fill_at_run(spec.command, None, self._param_values)})


def search_operator(recipe: Recipe, name: str, experiment: Experiment) -> HyperparameterSearchOperator:
    search = experiment.search
    return RecipeSearchOperator(
        task_id=name,
        trial=trial_spec(name, experiment),
        search_space=search_space(experiment),
        search=SearchSettings(sampler=search.sampler, n_trials=experiment.samples, max_parallel=experiment.parallel or 1,
                              objective_metric=search.objective, direction=search.direction, pruner=search.pruner,
                              seed=recipe.seed),
        backend=experiment.backend or recipe.backend,
        retries=experiment.retries,
    )
