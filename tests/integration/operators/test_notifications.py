"""Gate rejections and failed trainings notify through Airflow notifiers (real dag.test() runs): a
recording BaseNotifier and the HTTP provider's HttpNotifier posting to a loopback webhook."""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from dag_runs import load_dag, run

from support import TEST_DAGS

pytestmark = pytest.mark.integration


@pytest.fixture
def record(tmp_path, monkeypatch):
    path = tmp_path / "notifications.jsonl"
    monkeypatch.setenv("ML_NOTIFY_RECORD", str(path))
    return lambda: [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def webhook(monkeypatch):
    """A loopback chat webhook: the JSON bodies POSTed to it."""
    received = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            received.append((self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AIRFLOW_CONN_ML_NOTIFY_TEST", f"http://127.0.0.1:{server.server_address[1]}")
    yield received
    server.shutdown()


def test_gate_rejection_is_sent_through_every_notifier(airflow_db, record, webhook):
    model = f"notify_{uuid.uuid4().hex[:8]}"
    result = run(load_dag(TEST_DAGS / "ml_notify_test_dags.py", "gate_dag"), {"model_name": model})
    assert result.state == "success" and result.value("gate")["passed"] is False
    expected = (
        f"Model {model} was not promoted by ml_gate_notify_test (run {result.run_id}): "
        "accuracy = 0.5 is below the minimum 0.9; no champion yet: nothing to beat"
    )
    assert record() == [{"task_id": "gate", "message": expected}]
    assert webhook == [("/hook", {"text": expected})]


def test_failed_training_calls_its_failure_notifier(airflow_db, record):
    result = run(load_dag(TEST_DAGS / "ml_notify_test_dags.py", "failure_dag"))
    assert result.states[("train", -1)] == "failed"
    [sent] = record()
    assert sent["task_id"] == "train"
    assert sent["message"].startswith(f"Task train of ml_training_failure_notify_test failed (run {result.run_id}, try 1): ")
    assert "aml-notify-test.npz" in sent["message"]
