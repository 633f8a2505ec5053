"""A running search's trials for the training view, read from its Optuna study (the task's summary has them only
once the search ends): the study the task instance's every try shares (``search.study.study_name``), in the
storage its operator names, else ``[ml_training] search_storage_url``, else the default journal file. Read-only:
no study is created; a storage this API server cannot reach, or one named by a template, is said, not raised."""

from __future__ import annotations

from typing import Any

MAX_TRIALS_SHOWN = 500  # the newest; a page of 10,000 rows helps no one


def live_trials(task: Any, dag_id: str, task_id: str, run_id: str, map_index: int) -> dict[str, Any] | None:
    """``{"trials": [...], "best_trial": n | None}`` of the search task's study so far, ``{"note": why}`` where it
    cannot be read here, None for a task that is no search."""
    if getattr(task, "task_type", None) != "HyperparameterSearchOperator":
        return None
    url = getattr(task, "storage_url", None)
    if isinstance(url, str) and "{{" in url:
        return {"note": "its storage is named by a template: the trials show once the search ends"}
    from airflow.configuration import conf

    from airflow_ml_provider.jobs.naming import JobIdentity
    from airflow_ml_provider.search.runner import trial_table
    from airflow_ml_provider.search.study import open_storage, study_name

    url = url or conf.get("ml_training", "search_storage_url", fallback=None) or None
    name = study_name(JobIdentity(dag_id, task_id, run_id, map_index))
    try:
        storage = open_storage(url)
        study = storage.get_study_id_from_name(name)
        trials = storage.get_all_trials(study, deepcopy=False)
    except KeyError:
        return {"trials": [], "best_trial": None}  # the task has not created its study yet
    except Exception as exc:  # noqa: BLE001 - the page says what it could not read, with no URL or secret
        return {"note": f"its study could not be read here ({type(exc).__name__})"}
    try:
        best = storage.get_best_trial(study).number
    except ValueError:  # no trial completed yet
        best = None
    return {"trials": trial_table(trials[-MAX_TRIALS_SHOWN:]), "best_trial": best}
