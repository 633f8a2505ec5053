"""Evaluation: a trained model on held-out data, recorded as an MLflow run with its artifacts."""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import literal
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from airflow_ml_provider.artifact_layout import evaluation_dir, inputs_dir, join
from airflow_ml_provider.hooks.model_registry import (
    CHAMPION,
    LINEAGE_KEY,
    ModelRegistryHook,
    check_model_name,
)
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import Framework
from airflow_ml_provider.operators.base_job import BaseJobOperator
from airflow_ml_provider.operators.config import JobRequest
from airflow_ml_provider.operators.links import MLflowEvaluationLink, job_links
from airflow_ml_provider.reporting.mlflow_output import mlflow_output_to_task_log

_NOT_METRICS = {"rows", "n_features", "n_classes"}
_FRAMEWORK_BY_SUFFIX = {".txt": "lightgbm", ".ubj": "xgboost", ".keras": "keras", ".pt": "pytorch"}


def _lineage_key(ti, trained: dict[str, Any]) -> str:
    """The evaluation's identity: DAG run, training job and model file (a retrained model is a new one)."""
    parts = (ti.dag_id, ti.run_id, trained["job_name"], trained.get("model_path") or "")
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class EvaluateModelOperator(BaseJobOperator):
    """Evaluates a training task's model in a one-worker job (``runtime.evaluate``, in the training
    image: loading a Keras model needs TensorFlow, which the Airflow worker lacks), then records an
    MLflow run: held-out metrics, the per-step training series read from the training job's log,
    and two artifacts, a training-curve plot and a metrics report.

    Args:
        training: the training task's result (``{"job_name", "backend", "model_path", ...}``), or the
            task_id to pull it from at run time (after a branch: ``"train_{{ params.framework }}"``).
        test_data: the held-out set (.npz/.csv), readable by the job.
        data_version: recorded as lineage.
        experiment_name: MLflow experiment (default: the DAG id).
        model_name: the registered model the gate will compare with: its current ``champion`` is
            scored in the same job on the same ``test_data`` (so the gate never compares metrics
            measured on different data). Must be one of ``model_names`` (see ``check_model_name``).
        model_names: the model names this DAG may write (names or fnmatch patterns; default: the DAG id).
        registry_conn_id: the model registry (MLflow) connection.
        command: the evaluation argv before its arguments (default: ``runtime.evaluate``); templated.
        job, follow, on_finish, ml_conn_id, elasticsearch_conn_id, deferrable: see
            :class:`~airflow_ml_provider.operators.base_job.BaseJobOperator`.

    Idempotent: the run is keyed by DAG run, training job and model file, so
    evaluating again (a retry, a re-run of the DAG run) returns the recorded run instead of logging a
    second one, and the deploy task then finds the version already made from it. (Not the model's
    content hash: a LightGBM model file records its workers' ports, so it differs between runs.)

    Returns (XCom): ``{"metrics", "mlflow_run_id", "model_path", "framework", "n_features",
    "n_classes", "lineage", "lineage_key", "job_name", "backend", "url", "artifacts_url",
    "model_name", "champion"}`` (the two URLs: the MLflow run, and its artifacts: empty without an
    MLflow UI URL; ``champion``: None, or ``{"version", "metrics"}`` measured on the same rows, or
    ``{"version", "error"}`` when the champion could not be scored on them).
    """

    template_fields: Sequence[str] = (
        *BaseJobOperator.template_fields,
        "command",
        "training",
        "test_data",
        "data_version",
        "experiment_name",
        "model_name",
    )
    operator_extra_links = (*job_links(), MLflowEvaluationLink())
    ui_color = "#fdebd0"

    def __init__(
        self,
        *,
        training: dict[str, Any] | str,
        test_data: str,
        data_version: str | None = None,
        experiment_name: str | None = None,
        model_name: str | None = None,
        model_names: Sequence[str] | None = None,
        registry_conn_id: str = ModelRegistryHook.default_conn_name,
        command: list[str] | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.training = training
        self.test_data = test_data
        self.data_version = data_version
        self.experiment_name = experiment_name
        self.model_name = model_name
        self.model_names = list(model_names) if model_names else None
        self.registry_conn_id = registry_conn_id
        self.command = command
        self._champion: dict[str, Any] | None = None  # the champion placed for this run's job
        self._identity: JobIdentity | None = None

    def job_request(self) -> JobRequest:
        """One worker running ``runtime.evaluate``; it reads the training job's model, which lives in that
        job's directory (an input of this job)."""
        command = self.command or ["python", "-m", "airflow_ml_provider.runtime.evaluate"]
        command = [*command, "--model", self.training["model_path"], "--test-data", self.test_data]
        champion = self._place_champion()
        inputs = [self.training["model_path"]]
        if champion and "location" in champion:
            command += ["--champion-model", champion["location"]]
            inputs.append(champion["location"])
        return JobRequest(Framework.GENERIC, command, inputs=inputs)

    def _place_champion(self) -> dict[str, Any] | None:
        """During a task run with ``model_name``: copy the champion's model file, checked against its recorded
        sha256, beside this job's directory (``inputs_dir``, where the job reads it), once. None: no champion,
        or it is this very model."""
        if self._identity is None or not self.model_name or self._champion is not None:
            return self._champion or None
        ti = self._identity
        name = self.model_name
        try:
            check_model_name(name, self.model_names, ti.dag_id)
        except ValueError as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}") from None
        registry = ModelRegistryHook(self.registry_conn_id)
        with mlflow_output_to_task_log():
            held = registry.alias_version(name, CHAMPION)
        if held is None or held["tags"].get(LINEAGE_KEY) == _lineage_key(ti, self.training):
            self._champion = {}
            return None
        self._champion = {"version": held["version"]}
        job_dir, store = self.runner.job_dir(ti.name), self.runner.setup.store
        if not job_dir or store is None:
            self._champion["error"] = "no artifact root to hand the champion's model to the evaluation job"
            return self._champion
        with mlflow_output_to_task_log():
            self._champion["location"] = registry.place_model_file(name, held["version"], store,
                                                                   join(inputs_dir(job_dir), "champion"))
        self.log.info("The champion, %s version %d, is scored on the same held-out rows", name, held["version"])
        return self._champion

    def render_template_fields(self, context, jinja_env=None) -> None:
        """Pull the training result first when given a task id: the job's command (rendered into the
        manifest) names its model. The pulled value is data, wrapped so Jinja leaves it as it is."""
        self._identity = JobIdentity.from_context(context)
        if isinstance(self.training, str):
            task_id = self.render_template(self.training, context, jinja_env)
            result = context["ti"].xcom_pull(task_ids=task_id)
            if not isinstance(result, dict) or "model_path" not in result:  # D6: nothing trained, said so
                raise AirflowSkipException(
                    f"{self.task_id}: nothing to evaluate: task {task_id!r} left no training result (marked success "
                    f"by hand while its job ran, which cancels the job); clear {task_id!r} to train")
            self.training = literal(result)
        super().render_template_fields(context, jinja_env)

    def finish(self, context, job: dict[str, Any]) -> dict[str, Any]:
        """Record the job's measurements as an MLflow run (once per model: see above)."""
        trained, result, ti = self.training, job["metrics"], context["ti"]
        metrics = {
            k: float(v)
            for k, v in result.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and k not in _NOT_METRICS
        }
        lineage = {
            "dag_id": ti.dag_id,
            "run_id": ti.run_id,
            "task_id": ti.task_id,
            "training_job": trained["job_name"],
            "training_backend": trained.get("backend") or "unknown",
            "image": trained.get("image") or "unknown",
            "data_version": self.data_version or "unknown",
            "model_sha256": result["model_sha256"],
        }
        if isinstance(result.get("rows_sha256"), str):  # which rows: another run's metrics on them compare
            lineage["test_rows_sha256"] = result["rows_sha256"]
        key = _lineage_key(ti, trained)
        champion = self._measured_champion(result)
        registry = ModelRegistryHook(self.registry_conn_id)
        with mlflow_output_to_task_log():
            experiment = registry.experiment_id(self.experiment_name or ti.dag_id)
            run_id = registry.find_run(experiment, key)
            if run_id:
                self.log.info("This model's evaluation is already recorded as MLflow run %s", run_id)
            else:
                run_id = self._log_run(registry, experiment, key, context, result, metrics, lineage, champion)
        url = registry.run_url(experiment, run_id)
        framework = _FRAMEWORK_BY_SUFFIX.get(Path(trained["model_path"]).suffix, "unknown")
        self.log.info("Held-out metrics of the %s model: %s (MLflow run %s)", framework, metrics, run_id)
        if champion:
            self.log.info("The champion (version %d) on the same rows: %s", champion["version"],
                          champion.get("metrics") or champion.get("error"))
        return {
            "job_name": job["job_name"],
            "backend": job["backend"],
            "metrics": metrics,
            "mlflow_run_id": run_id,
            "model_path": trained["model_path"],
            "framework": framework,
            "n_features": result["n_features"],
            "n_classes": result["n_classes"],
            "lineage": lineage,
            "lineage_key": key,
            "url": url,
            "artifacts_url": url and f"{url}/artifacts",
            "model_name": self.model_name,
            "champion": champion,
        }

    def _measured_champion(self, result: dict[str, Any]) -> dict[str, Any] | None:
        """What the job measured of the champion placed for it (metrics, or why it could not)."""
        placed = self._champion or None
        if placed is None:
            return None
        reported = result.get("champion") if "location" in placed else None
        if isinstance(reported, dict) and not reported.get("error"):
            metrics = {k: float(v) for k, v in reported.items() if _is_number(v)}
            return {"version": placed["version"], "metrics": metrics}
        error = (reported or {}).get("error") if isinstance(reported, dict) else None
        return {"version": placed["version"], "error": str(error or placed.get("error") or "not reported by the job")}

    def _keep(self, context, files: list[Path]) -> None:
        """Also store the evaluation files with this job's other artifacts: ``<job dir>/evaluation/``
        under the artifact root (the MLflow run holds them too)."""
        from airflow_ml_provider.runtime import storage

        runner = self.runner
        job_dir = runner.job_dir(JobIdentity.from_context(context).name)
        store = runner.setup.store
        if not job_dir or store is None:
            return
        kept = [storage.upload(str(f), store.locate(join(evaluation_dir(job_dir), f.name))) for f in files]
        self.log.info("Evaluation files stored under %s: %s", evaluation_dir(job_dir), [Path(k).name for k in kept])

    def _log_run(
        self,
        registry: ModelRegistryHook,
        experiment: str,
        key: str,
        context,
        result: dict[str, Any],
        metrics: dict[str, float],
        lineage: dict[str, str],
        champion: dict[str, Any] | None,
    ) -> str:
        from airflow_ml_provider.runtime.report import PLOT, plot_training_curve, write_report

        trained = self.training
        history = self.runner.history(trained["backend"], trained["job_name"])
        with tempfile.TemporaryDirectory(prefix="evaluation-") as tmp:
            files = [
                plot_training_curve(history, Path(tmp) / PLOT, f"Training of {trained['job_name']}"),
                *write_report(tmp, result, trained.get("metrics", {}), lineage),
            ]
            self._keep(context, files)
            tags = {LINEAGE_KEY: key, **{f"airflow.{k}": str(v) for k, v in lineage.items()}}
            if champion:  # the champion measured on the same rows, recorded next to the challenger
                tags["airflow.champion_version"] = str(champion["version"])
                if champion.get("error"):
                    tags["airflow.champion_error"] = champion["error"][:500]
                metrics = {**metrics, **{f"champion_{k}": v for k, v in champion.get("metrics", {}).items()}}
            params = {
                **dict(context.get("params") or {}),
                "model_path": trained["model_path"],
                "test_data": self.test_data,
            }
            return registry.log_run(
                experiment,
                f"{lineage['run_id']} {trained['job_name']}",
                tags,
                params,
                metrics,
                history,
                files,
            )
