"""What a recipe would run, for review before deploying it: its tasks and every job's manifest."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from airflow_ml_provider.artifact_layout import job_dirs
from airflow_ml_provider.jobs.backends.base import Backend
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.recipes.model import Recipe, Trial


def summary(recipe: Recipe) -> str:
    """One line per task: trials, framework, workers, hardware, upstream tasks."""
    lines = []
    for name, experiment in recipe.experiments.items():
        resources = experiment.hardware.resources().model_dump(exclude_defaults=True)
        lines.append(
            f"task {name}: {experiment.num_samples} trial(s), {experiment.job_framework.value}, "
            f"{experiment.workers} worker(s) each, resources {resources or 'default'}, "
            f"after: {', '.join(experiment.depends_on) or '-'}"
        )
    return "\n".join(lines)


def trial_jobs(recipe: Recipe, name: str, backend: Backend, run_id: str = "manual",
               limit: int | None = None) -> Iterator[tuple[Trial, JobIdentity, TrainingJobSpec]]:
    """Each trial of experiment ``name`` (up to ``limit``) with its job's identity and spec on ``backend``."""
    experiment = recipe.experiments[name]
    for trial in recipe.trials(name)[:limit]:
        identity = JobIdentity(recipe.dag_id, name, run_id, map_index=trial.index)
        spec = TrainingJobSpec(
            framework=experiment.job_framework, command=trial.argv, num_workers=experiment.workers,
            image=experiment.image, resources=experiment.hardware.resources(), env=experiment.env,
            **job_dirs(backend.default_artifact_dir(identity.name)),
        )
        yield trial, identity, spec


def render_recipe(recipe: Recipe, backend_for: Callable[[str | None], Backend], run_id: str = "manual",
                  limit: int | None = None) -> str:
    """The summary, then for each trial (up to ``limit`` per task) its parameters and the backend's
    manifest, as a ``---``-separated stream. ``backend_for`` maps a recipe's backend name to a backend."""
    parts = ["\n".join(f"# {line}" for line in [f"DAG {recipe.dag_id}", *summary(recipe).splitlines()])]
    for name, experiment in recipe.experiments.items():
        backend = backend_for(experiment.backend or recipe.backend)
        for trial, identity, spec in trial_jobs(recipe, name, backend, run_id, limit):
            params = " ".join(f"{key}={value}" for key, value in trial.params.items())
            parts.append(f"# {name}[{trial.index}] {params}\n"
                         + backend.render(identity.name, spec, identity.labels()))
    return "\n---\n".join(parts)
