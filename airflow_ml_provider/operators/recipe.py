"""The task of one recipe trial: a training job whose every argument comes from the recipe."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from airflow_ml_provider.artifact_layout import RUN_DIR
from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.operators.training import TrainingJobOperator


class RecipeTrialOperator(TrainingJobOperator):
    """Runs one trial of a recipe experiment (mapped: one map index per sample).

    No argument is templated: recipe values are data, so a value that looks like Jinja reaches the job
    as those characters, never rendered. The one exception is the literal ``{{run_dir}}``, replaced (as
    plain text) by the DAG run's own data folder under the artifact root, where one experiment's job can
    leave files for the next (``<artifact_root>/data/<dag_id>/<run key>``).

    Args:
        trial: ``{"params": {...}, "argv": [...]}`` or that object as JSON text (what ``dag_from_recipe``
            maps over: Airflow walks mapped values at parse time, and one string per trial keeps a
            4,096-trial DAG fast to parse); its ``argv`` is the job's command.
        command: taken from ``trial``.
        framework, num_workers, outputs: see :class:`~airflow_ml_provider.operators.training.TrainingJobOperator`.
        job, follow, on_finish, ml_conn_id, elasticsearch_conn_id, deferrable: see
            :class:`~airflow_ml_provider.operators.job_run.BaseJobOperator` (a recipe passes ``job`` as a
            dict, its ``resources`` included).

    Returns (XCom): the training operators' summary plus the trial's ``params``.
    """

    template_fields: Sequence[str] = ("manifest",)  # filled by the backend after templating, never by Jinja
    ui_color = "#e8daef"

    def __init__(self, *, trial: str | dict[str, Any], **kwargs: Any):
        trial = json.loads(trial) if isinstance(trial, str) else trial
        super().__init__(command=trial["argv"], **kwargs)
        self.trial_params: dict[str, Any] = trial.get("params", {})
        self._run_dir: str | None = None

    def execute(self, context) -> dict[str, Any]:
        self._locate_run_dir(context)
        return super().execute(context)

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        self._locate_run_dir(context)
        return super().execute_complete(context, event)

    def _locate_run_dir(self, context) -> None:
        """The run's data folder, when the command names it (at execution: a mapped task's instance is not
        rendered through its own ``render_template_fields``); the job's spec is then built again with it."""
        if self._run_dir is None and any(RUN_DIR in argument for argument in self.command):
            ti = context["ti"]
            hook = TrainingBackendHook(self.ml_conn_id)
            self._run_dir = str(hook.run_data_dir(ti.dag_id, ti.run_id, self.job.get("backend")))
            self.__dict__.pop("runner", None)

    def build_command(self) -> list[str]:
        """The trial's argv with ``{{run_dir}}`` replaced by the run's data folder."""
        if self._run_dir is None:
            return self.command
        return [argument.replace(RUN_DIR, self._run_dir) for argument in self.command]

    @property
    def trial_label(self) -> str:
        """Shown for each map index in the UI: ``lr=0.01 batch_size=32``."""
        return " ".join(f"{name}={value}" for name, value in self.trial_params.items()) or "trial"

    def finish(self, context, result: dict[str, Any]) -> dict[str, Any]:
        return {**result, "params": self.trial_params}
