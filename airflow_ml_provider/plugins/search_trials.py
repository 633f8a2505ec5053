"""A search's trials for the training view, read from its Optuna study (the task's summary has them only once the
search ends, and without each trial's objective per step): the study the task instance's every try shares
(``search.study.study_name``), in the storage its operator names, else ``[ml_training] search_storage_url``, else
the default journal file. Read-only: no study is created; a storage this API server cannot reach, or one named by a
template, is said, not raised."""

from __future__ import annotations

from typing import Any

MAX_TRIALS_SHOWN = 500  # the newest; a page of 10,000 rows helps no one
MAX_STEPS_SHOWN = 500  # of a trial's objective per step, evenly kept
# The serialized DAG the API server reads keeps an operator's class name (``task_type``), not its bases: the
# provider's search operator and the recipe one built on it (recipes.search).
SEARCH_TASK_TYPES = frozenset({"HyperparameterSearchOperator", "RecipeSearchOperator"})


def is_search(task: Any) -> bool:
    """Whether ``task`` (a serialized DAG's) is a hyperparameter search, whose view lists its trials."""
    return getattr(task, "task_type", None) in SEARCH_TASK_TYPES


def _study(task: Any, dag_id: str, task_id: str, run_id: str, map_index: int):
    """``(storage, study id)``, ``(None, None)`` where the task has not created its study yet, or ``{"note": why}``
    where it cannot be read here; None for a task that is no search."""
    if not is_search(task):
        return None
    url = getattr(task, "storage_url", None)
    if isinstance(url, str) and "{{" in url:
        return {"note": "its storage is named by a template: the trials show once the search ends"}
    from airflow.configuration import conf

    from airflow_ml_provider.jobs.naming import JobIdentity
    from airflow_ml_provider.search.study import open_storage, study_name

    url = url or conf.get("ml_training", "search_storage_url", fallback=None) or None
    try:
        storage = open_storage(url)
        return storage, storage.get_study_id_from_name(study_name(JobIdentity(dag_id, task_id, run_id, map_index)))
    except KeyError:
        return None, None  # the task has not created its study yet
    except Exception as exc:  # noqa: BLE001 - the page says what it could not read, with no URL or secret
        return {"note": f"its study could not be read here ({type(exc).__name__})"}


def _objective(storage, study) -> dict[str, Any]:
    """The objective as the search recorded it in its study: its metric (``search.study.OBJECTIVE_ATTR``; None in a
    study an older search created) and the study's direction."""
    from airflow_ml_provider.search.study import OBJECTIVE_ATTR

    return {"objective_metric": storage.get_study_user_attrs(study).get(OBJECTIVE_ATTR),
            "direction": storage.get_study_directions(study)[0].name.lower()}


def live_trials(task: Any, dag_id: str, task_id: str, run_id: str, map_index: int) -> dict[str, Any] | None:
    """``{"trials": [...], "best_trial": n | None, "objective_metric", "direction"}`` of the search task's study so
    far, ``{"note": why}`` where it cannot be read here, None for a task that is no search."""
    found = _study(task, dag_id, task_id, run_id, map_index)
    if not isinstance(found, tuple):
        return found
    storage, study = found
    if storage is None:
        return {"trials": [], "best_trial": None}
    from airflow_ml_provider.search.runner import trial_table

    try:
        trials = storage.get_all_trials(study, deepcopy=False)
        objective = _objective(storage, study)
    except Exception as exc:  # noqa: BLE001 - as above
        return {"note": f"its study could not be read here ({type(exc).__name__})"}
    try:
        best = storage.get_best_trial(study).number
    except ValueError:  # no trial completed yet
        best = None
    return {"trials": trial_table(trials[-MAX_TRIALS_SHOWN:]), "best_trial": best, **objective}


def one_trial(task: Any, dag_id: str, task_id: str, run_id: str, map_index: int, number: int) -> dict[str, Any] | None:
    """Trial ``number`` of the search task's study as its trial page shows it: its row of the trials table, its
    objective per step (``[[step, value], ...]``, what the runner reported to Optuna), its failure, the search's
    MLflow run (``search_mlflow_url``, while the search runs), the objective's metric and direction;
    ``{"note": why}`` where the study cannot be read here or has no such trial, None for a task that is no search."""
    found = _study(task, dag_id, task_id, run_id, map_index)
    if not isinstance(found, tuple):
        return found
    storage, study = found
    if storage is None:
        return {"note": "the search has not created its study yet"}
    from airflow_ml_provider.search.runner import FAILURE_ATTR, trial_table
    from airflow_ml_provider.search.tracking import PARENT_URL_ATTR

    try:
        trial = storage.get_trial(storage.get_trial_id_from_study_id_trial_number(study, number))
        parent = storage.get_study_user_attrs(study).get(PARENT_URL_ATTR)
        objective = _objective(storage, study)
    except KeyError:
        return {"note": f"its study has no trial {number}"}
    except Exception as exc:  # noqa: BLE001 - as above
        return {"note": f"its study could not be read here ({type(exc).__name__})"}
    steps = sorted(trial.intermediate_values.items())
    stride = max(1, -(-len(steps) // MAX_STEPS_SHOWN))
    kept = steps[::stride] + ([steps[-1]] if steps and (len(steps) - 1) % stride else [])
    return {**trial_table([trial])[0], "steps": [[step, value] for step, value in kept],
            "failure": trial.user_attrs.get(FAILURE_ATTR), "search_mlflow_url": parent, **objective}
