"""The shipped pipeline's notifiers come from configuration: none by default (and no provider imported at
parse time), an HttpNotifier on the gate and on every training task when a webhook connection is set."""

from __future__ import annotations

import runpy
import subprocess
import sys

from support import REPO

PIPELINE = str(REPO / "dags" / "ml_training_pipeline.py")
TRAINING = ("train_lightgbm", "train_xgboost", "train_horovod", "train_pytorch")


def test_no_notifier_and_no_provider_import_without_configuration(monkeypatch):
    monkeypatch.delenv("AIRFLOW__ML_TRAINING__NOTIFY_HTTP_CONN_ID", raising=False)
    probe = (f"import runpy, sys; d = runpy.run_path({PIPELINE!r})['dag']; "
             "assert 'airflow.providers.http.notifications.http' not in sys.modules, 'notifier imported'; "
             "print(len(d.task_dict['gate'].notifiers), [len(d.task_dict[t].on_failure_callback or []) "
             f"for t in {TRAINING!r}])")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[-2] == "0 [0, 0, 0, 0]"


def test_a_configured_webhook_notifies_gate_rejections_and_failed_trainings(monkeypatch):
    from airflow.providers.http.notifications.http import HttpNotifier

    monkeypatch.setenv("AIRFLOW__ML_TRAINING__NOTIFY_HTTP_CONN_ID", "team_chat")
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__NOTIFY_ENDPOINT", "/hooks/ml")
    dag = runpy.run_path(PIPELINE)["dag"]
    [gate] = dag.task_dict["gate"].notifiers
    assert isinstance(gate, HttpNotifier) and (gate.http_conn_id, gate.endpoint) == ("team_chat", "/hooks/ml")
    assert "gate.reasons" in gate.json["text"]
    for task_id in TRAINING:
        [failure] = dag.task_dict[task_id].on_failure_callback
        assert isinstance(failure, HttpNotifier) and "exception" in failure.json["text"]
