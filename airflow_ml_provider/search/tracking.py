"""MLflow records of a search: one parent run, one child run per finished trial, the trials plot.

Idempotent across restarts: the parent run's id is kept in the study, and a trial whose child run
already exists is not logged twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from airflow_ml_provider.search.plot import plot_trials
from airflow_ml_provider.search.runner import JOB_NAME_ATTR
from airflow_ml_provider.search.space import SearchSettings, SearchSpace

PARENT_RUN_ATTR = "mlflow_run_id"
PARENT_URL_ATTR = "mlflow_url"  # the parent run's page, which the training view's trial page links while it runs
TRIAL_TAG = "optuna.trial_number"
_STATUS = {TrialState.COMPLETE: "FINISHED", TrialState.PRUNED: "KILLED", TrialState.FAIL: "FAILED"}


class MlflowSearchLog:
    """Args:
        tracking_uri: the MLflow tracking store.
        experiment_id: the experiment the runs belong to.
        run_url: a run id -> its page in the MLflow UI ("" where there is none: ``ModelRegistryHook.run_url``).
    """

    def __init__(self, tracking_uri: str, experiment_id: str, run_url: Callable[[str], str] = lambda run_id: ""):
        try:
            from mlflow import MlflowClient
        except ImportError:
            raise ImportError("recording a search in MLflow needs mlflow-skinny and matplotlib: install "
                              "airflow-ml-provider[search], or pass track_mlflow=False") from None
        self.client = MlflowClient(tracking_uri)
        self.experiment_id = experiment_id
        self.run_url = run_url
        self.parent_run_id: str | None = None
        self.children: dict[int, str] = {}  # trial number -> its child run's id

    def start(self, study: optuna.Study, settings: SearchSettings, space: SearchSpace) -> str:
        """Create the parent run, or reopen the one an earlier session of this study created."""
        run_id = study.user_attrs.get(PARENT_RUN_ATTR)
        if run_id is None:
            run = self.client.create_run(self.experiment_id, run_name=study.study_name,
                                         tags={"optuna.study_name": study.study_name})
            run_id = run.info.run_id
            study.set_user_attr(PARENT_RUN_ATTR, run_id)
            if url := self.run_url(run_id):
                study.set_user_attr(PARENT_URL_ATTR, url)
            self._log(run_id, params={k: v for k, v in settings.model_dump().items() if v is not None})
            self.client.log_dict(run_id, space.model_dump(), "search_space.json")
        else:
            self.client.update_run(run_id, status="RUNNING")
            children = self.client.search_runs([self.experiment_id],
                                               f"tags.mlflow.parentRunId = '{run_id}'", max_results=50_000)
            self.children = {int(child.data.tags[TRIAL_TAG]): child.info.run_id for child in children
                             if TRIAL_TAG in child.data.tags}
        self.parent_run_id = run_id
        return run_id

    def log_trial(self, trial: FrozenTrial, metric: str) -> None:
        """One child run: the trial's parameters, its objective at each step and its final value."""
        if trial.number in self.children or trial.state not in _STATUS:
            return
        run = self.client.create_run(
            self.experiment_id, run_name=f"trial-{trial.number}",
            tags={"mlflow.parentRunId": self.parent_run_id, TRIAL_TAG: str(trial.number),
                  "optuna.state": trial.state.name, "job_name": trial.user_attrs.get(JOB_NAME_ATTR, "")},
        )
        metrics = [(metric, value, step) for step, value in sorted(trial.intermediate_values.items())]
        if trial.state is TrialState.COMPLETE:  # a pruned trial's value is only its last step's
            metrics.append((f"final_{metric}", trial.value, 0))
        self._log(run.info.run_id, params=trial.params, metrics=metrics)
        self.client.set_terminated(run.info.run_id, _STATUS[trial.state])
        self.children[trial.number] = run.info.run_id

    def finish(self, study: optuna.Study, summary: dict[str, Any] | None, metric: str) -> None:
        """Catch up on unlogged trials, attach the plot and trials table, close the parent run."""
        for trial in study.get_trials(deepcopy=False):
            self.log_trial(trial, metric)
        run_id = self.parent_run_id
        with TemporaryDirectory() as tmp:
            self.client.log_artifact(run_id, str(plot_trials(study, Path(tmp) / "trials.png", metric)))
        if summary is not None:
            self.client.log_dict(run_id, summary, "trials.json")
            self._log(run_id, metrics=[(f"best_{metric}", summary["best_value"], 0)]
                      + [(f"trial_{metric}", t["value"], t["number"]) for t in summary["trials"]
                         if t["state"] == "COMPLETE"])
        self.client.set_terminated(run_id, "FINISHED" if summary is not None else "FAILED")

    def links(self, summary: dict[str, Any]) -> dict[str, Any]:
        """``summary`` with the parent run's page and each trial's child run (id, page), for the training view's
        trial pages to link without asking MLflow."""
        trials = [{**t, "mlflow_run_id": self.children.get(t["number"]),
                   "mlflow_url": self.run_url(self.children.get(t["number"], ""))} for t in summary["trials"]]
        return {**summary, "trials": trials, "mlflow_url": self.run_url(self.parent_run_id or "")}

    def _log(self, run_id: str, params: dict | None = None, metrics: list | None = None) -> None:
        from mlflow.entities import Metric, Param

        now = int(time.time() * 1000)
        self.client.log_batch(
            run_id,
            params=[Param(k, v if isinstance(v, str) else json.dumps(v)) for k, v in (params or {}).items()],
            metrics=[Metric(key, float(value), now, step) for key, value, step in (metrics or [])],
        )
