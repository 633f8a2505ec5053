"""The tasks of a recipe DAG: one trial of an experiment (a training job whose every argument comes from the
recipe or, checked, from the run's Params), and the report of a mapped experiment's best trial."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_ml_provider.artifact_layout import RUN_DIR
from airflow_ml_provider.hooks.model_registry import LINEAGE_KEY, ModelRegistryHook
from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.operators.config import JobRequest
from airflow_ml_provider.operators.links import MLflowBestTrialLink
from airflow_ml_provider.operators.params import conf_problems, number_problems, refuse, text_problems
from airflow_ml_provider.operators.training import TrainingJobOperator
from airflow_ml_provider.patterns import RUN_PLACEHOLDER, argv_text


def checked_params(context) -> dict[str, Any]:
    """The run's values of the DAG's Params, after what Airflow's Param validation lets through is refused
    naming the Param (conf keys that name no Param, NaN, ``5.0`` for an integer, control characters)."""
    declared = context["dag"].params
    values = {name: context["params"][name] for name in declared if name in context["params"]}
    refuse(conf_problems(context["dag_run"].conf, declared) + number_problems(values, declared)
           + text_problems(values, declared))
    return values


def check_image(task_id: str, image: str | None, backend: str | None, ml_conn_id: str) -> None:
    """A recipe's ``image`` is one of the deployment's images, checked when the task runs (the list comes from
    the training connection, which a DAG's parse never reads): on the local backend its environments
    (``TrainingBackendHook.local_images``, compared resolved), on the Kubernetes backends the connection's
    ``image``/``image_<framework>`` extras. A refusal names the recipe field (a task id is its experiment's
    name), never the value."""
    if not image:
        return
    hook = TrainingBackendHook(ml_conn_id)
    name = hook.backend_name(backend)
    if name == "local":
        allowed = hook.local_images()
        found = os.path.realpath(image) in {os.path.realpath(path) for path in allowed}
        more = "the connection's local_image, $AIRFLOW_ML_LOCAL_IMAGE and [ml_training] local_images"
    else:
        allowed = sorted(set(hook.settings().images().values()))
        found = image in allowed
        more = f"the {ml_conn_id} connection's image and image_<framework> extras"
    if not found:
        raise AirflowFailException(f"{task_id}: experiments.{task_id}.image: not one of the images this deployment "
                                   f"allows on backend {name} ({', '.join(allowed) or 'none'}: {more})")


def fill_at_run(argv: Sequence[str], run_dir: str | None, params: Mapping[str, Any]) -> list[str]:
    """``{{run_dir}}`` and ``{{params.<name>}}`` replaced in one pass over each argument: a filled-in value
    is never scanned again, so a Param holding ``{{run_dir}}`` reaches the job as those characters."""
    def value(match) -> str:
        if match.group(1) == "run_dir":
            return run_dir if run_dir is not None else match.group(0)
        name = match.group(2)
        return argv_text(params[name]) if name in params else match.group(0)

    return [RUN_PLACEHOLDER.sub(value, argument) for argument in argv]


class RecipeTrialOperator(TrainingJobOperator):
    """Runs one trial of a recipe experiment (mapped: one map index per sample).

    No argument is templated: recipe values are data, so a value that looks like Jinja reaches the job
    as those characters, never rendered. Two placeholders are filled in (as plain text) when the trial
    runs: ``{{run_dir}}``, the DAG run's own data folder under the artifact root, where one experiment's
    job can leave files for the next (``<artifact_root>/data/<dag_id>/<run key>``), and
    ``{{params.<name>}}``, the run's value of a recipe Param, once the Params are checked
    (:func:`checked_params`: a refused one fails the task for good, naming it).

    Args:
        trial: ``{"params": {...}, "argv": [...]}`` or that object as JSON text (what ``dag_from_recipe``
            maps over: Airflow walks mapped values at parse time, and one string per trial keeps a
            4,096-trial DAG fast to parse); its ``argv`` is the job's command.
        command: taken from ``trial``.
        framework, num_workers, outputs: see :class:`~airflow_ml_provider.operators.training.TrainingJobOperator`.
        job, follow, on_finish, ml_conn_id, elasticsearch_conn_id, deferrable: see
            :class:`~airflow_ml_provider.operators.base_job.BaseJobOperator` (a recipe passes ``job`` as a
            dict, its ``resources`` included).

    Returns (XCom): the training operators' summary plus the trial's ``params`` and ``map_index``.
    """

    template_fields: Sequence[str] = ("manifest",)  # filled by the backend after templating, never by Jinja
    ui_color = "#e8daef"

    def __init__(self, *, trial: str | dict[str, Any], **kwargs: Any):
        trial = json.loads(trial) if isinstance(trial, str) else trial
        super().__init__(command=trial["argv"], **kwargs)
        self.trial_params: dict[str, Any] = trial.get("params", {})
        self._run_dir: str | None = None
        self._param_values: dict[str, Any] = {}

    def execute(self, context) -> dict[str, Any]:
        check_image(self.task_id, self.job.get("image"), self.job.get("backend"), self.ml_conn_id)
        self._fill(context, checked_params(context))
        return super().execute(context)

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        self._fill(context, {name: context["params"][name] for name in context["dag"].params})
        return super().execute_complete(context, event)

    def _fill(self, context, params: dict[str, Any]) -> None:
        """What the command's run-time placeholders stand for (at execution: a mapped task's instance is
        not rendered through its own ``render_template_fields``); the job's runner is then made of them."""
        self._param_values = params
        if self._run_dir is None and any(RUN_DIR in argument for argument in self.command):
            ti = context["ti"]
            hook = TrainingBackendHook(self.ml_conn_id)
            self._run_dir = str(hook.run_data_dir(ti.dag_id, ti.run_id, self.job.get("backend")))
        self._runner = self.make_runner()

    def build_command(self) -> list[str]:
        """The trial's argv with the run's data folder and Param values filled in."""
        return fill_at_run(self.command, self._run_dir, self._param_values)

    def job_request(self) -> JobRequest:
        """A trial that names ``{{run_dir}}`` writes there (the run's data for its next experiments)."""
        request = super().job_request()
        return dataclasses.replace(request, output_dirs=[self._run_dir]) if self._run_dir else request

    @property
    def trial_label(self) -> str:
        """Shown for each map index in the UI: ``lr=0.01 batch_size=32``."""
        return " ".join(f"{name}={value}" for name, value in self.trial_params.items()) or "trial"

    def finish(self, context, result: dict[str, Any]) -> dict[str, Any]:
        return {**result, "params": self.trial_params, "map_index": context["ti"].map_index}


class RecipeBestTrialOperator(BaseOperator):
    """Reports the best trial of a mapped recipe experiment: which trial, its parameters and its metric, in
    the task log, in XCom and as an MLflow run (experiment: the DAG id) that the task's link opens.

    Runs once every trial has ended (``all_done``), over the trials that reported ``metric``; fails
    when none did.

    Args:
        experiment: the mapped experiment's task id.
        metric: the metric the trials' jobs report (their last value counts).
        direction: ``maximize`` or ``minimize``.
        track_mlflow: record the best trial as an MLflow run.
        registry_conn_id: the model registry (MLflow) connection.

    Returns (XCom): ``{"experiment", "metric", "direction", "best_trial", "best_value", "best_params",
    "best_job_name", "best_model_path", "n_reported", "n_trials", "trials": [{"trial", "params", "value",
    "job_name"}], "mlflow_run_id", "url"}``.
    """

    template_fields: Sequence[str] = ()  # recipe data, never a template
    operator_extra_links = (MLflowBestTrialLink(),)
    ui_color = "#d5f5e3"

    def __init__(self, *, experiment: str, metric: str, direction: str, track_mlflow: bool = True,
                 registry_conn_id: str = ModelRegistryHook.default_conn_name, **kwargs: Any):
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        if direction not in ("maximize", "minimize"):
            raise ValueError(f"{self.task_id}: direction must be maximize or minimize, not {direction!r}")
        self.experiment, self.metric, self.direction = experiment, metric, direction
        self.track_mlflow = track_mlflow
        self.registry_conn_id = registry_conn_id

    def execute(self, context) -> dict[str, Any]:
        results = context["ti"].xcom_pull(task_ids=self.experiment)  # every map index's value
        results = [r for r in (results if isinstance(results, list) else [results]) if isinstance(r, dict)]
        trials = [{"trial": r.get("map_index"), "params": r.get("params", {}), "value": _number(r, self.metric),
                   "job_name": r.get("job_name"), "model_path": r.get("model_path")} for r in results]
        reported = [t for t in trials if t["value"] is not None]
        if not reported:
            raise AirflowFailException(f"{self.task_id}: no trial of {self.experiment!r} reported {self.metric!r} "
                                       f"({len(results)} trial(s) finished): no best trial")
        best = (max if self.direction == "maximize" else min)(reported, key=lambda t: t["value"])
        summary = {
            "experiment": self.experiment, "metric": self.metric, "direction": self.direction,
            "best_trial": best["trial"], "best_value": best["value"], "best_params": best["params"],
            "best_job_name": best["job_name"], "best_model_path": best["model_path"],
            "n_reported": len(reported), "n_trials": len(trials),
            "trials": [{k: t[k] for k in ("trial", "params", "value", "job_name")} for t in trials],
        }
        run_id, url = self._record(context, summary) if self.track_mlflow else (None, "")
        label = " ".join(f"{k}={v}" for k, v in best["params"].items()) or "no parameters"
        self.log.info("Best trial of %s: #%s (%s): %s = %s (%s; %d of %d trials reported it); job %s%s",
                      self.experiment, best["trial"], label, self.metric, best["value"], self.direction,
                      len(reported), len(trials), best["job_name"], f"; MLflow: {url}" if url else "")
        return {**summary, "mlflow_run_id": run_id, "url": url}

    def _record(self, context, summary: dict[str, Any]) -> tuple[str, str]:
        """The MLflow run of this summary (once: a retry with the same trials finds it)."""
        from airflow_ml_provider.reporting.mlflow_output import mlflow_output_to_task_log

        ti, registry = context["ti"], ModelRegistryHook(self.registry_conn_id)
        digest = hashlib.sha256(json.dumps(summary, sort_keys=True, default=str).encode()).hexdigest()[:16]
        key = f"{ti.dag_id}/{ti.run_id}/{ti.task_id}/{digest}"
        with mlflow_output_to_task_log():
            experiment = registry.experiment_id(ti.dag_id)
            run_id = registry.find_run(experiment, key)
            if run_id is None:
                with tempfile.TemporaryDirectory(prefix="best-trial-") as tmp:
                    trials = Path(tmp) / "trials.json"
                    trials.write_text(json.dumps(summary, indent=2, default=str))
                    tags = {LINEAGE_KEY: key, "airflow.dag_id": ti.dag_id, "airflow.run_id": ti.run_id,
                            "airflow.task_id": ti.task_id, "airflow.best_job": str(summary["best_job_name"])}
                    params = {**summary["best_params"], "trial": summary["best_trial"], "metric": self.metric,
                              "direction": self.direction}
                    run_id = registry.log_run(experiment, f"{ti.run_id} {self.experiment} best trial", tags, params,
                                              {f"best_{self.metric}": summary["best_value"]}, [], [trials])
        return run_id, registry.run_url(experiment, run_id)


def _number(result: dict[str, Any], metric: str) -> float | None:
    value = (result.get("metrics") or {}).get(metric)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
