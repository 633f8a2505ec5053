"""Notifications through Airflow's notifier interface: a gate rejection (a recording notifier and the real
HttpNotifier to a loopback webhook) and a failed training task (``on_failure_callback``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from airflow.providers.http.notifications.http import HttpNotifier
from airflow.sdk import DAG, BaseNotifier

from airflow_ml_provider.operators.gate import ModelGateOperator
from airflow_ml_provider.operators.training import LightGBMTrainingOperator
from airflow_ml_provider.reporting.notify import FAILURE_MESSAGE, GATE_MESSAGE


class RecordingNotifier(BaseNotifier):
    """A real notifier whose transport is a JSON-lines file (``$ML_NOTIFY_RECORD``), so a test can read
    what was sent and with which rendered message."""

    template_fields = ("message",)

    def __init__(self, message: str):
        super().__init__()
        self.message = message

    def notify(self, context) -> None:
        with Path(os.environ["ML_NOTIFY_RECORD"]).open("a") as f:
            f.write(json.dumps({"task_id": context["ti"].task_id, "message": self.message}) + "\n")


with DAG("ml_gate_notify_test", schedule=None, params={"model_name": "notify_test"}) as gate_dag:
    ModelGateOperator(
        task_id="gate",
        evaluation={"metrics": {"accuracy": 0.5}},
        model_name="{{ params.model_name }}",
        model_names=["notify_*"],
        thresholds={"accuracy": 0.9},
        notifiers=[
            RecordingNotifier(GATE_MESSAGE),
            HttpNotifier(http_conn_id="ml_notify_test", endpoint="/hook", json={"text": GATE_MESSAGE}),
        ],
    )

with DAG("ml_training_failure_notify_test", schedule=None) as failure_dag:
    LightGBMTrainingOperator(
        task_id="train",
        train_data="/nonexistent/aml-notify-test.npz",
        num_workers=1,
        retries=0,
        on_failure_callback=[RecordingNotifier(FAILURE_MESSAGE)],
    )
