"""The model registry's credentials reach MLflow's requests and never the task process's environment
(every process the task starts, training workers included, would inherit it).

The server is a loopback HTTP endpoint that answers the MLflow REST call the hook makes and records,
per request, the Authorization header and the environment of the process at that moment.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from airflow_ml_provider.hooks.model_registry import ModelRegistryHook

PASSWORD, TOKEN = "reg-S3cret-pw", "reg-t0ken-value"
URI_NAMES = {"MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"}  # MLflow exports the current URIs itself


class _Recorder(BaseHTTPRequestHandler):
    seen: list[dict] = []

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.seen.append({"path": self.path, "authorization": self.headers.get("Authorization"),
                          "environ": dict(os.environ)})
        if self.path.startswith("/api/2.0/mlflow/experiments/get-by-name"):
            body = {"experiment": {"experiment_id": "42", "name": "exp", "lifecycle_stage": "active",
                                   "artifact_location": "mlflow-artifacts:/42"}}
            self._reply(200, body)
        else:
            self._reply(404, {"error_code": "ENDPOINT_NOT_FOUND", "message": self.path})

    def _reply(self, status: int, body: dict):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def mlflow_endpoint():
    _Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _connection(monkeypatch, conn_id: str, port: int, **fields):
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(
        {"conn_type": "ml_registry", "host": "127.0.0.1", "port": port, "schema": "http", **fields}))


def _changes(before: dict, after: dict) -> dict:
    return {name: value for name, value in after.items() if before.get(name) != value}


@pytest.mark.parametrize(("fields", "header"), [
    ({"login": "reg-user", "password": PASSWORD},
     "Basic " + base64.standard_b64encode(f"reg-user:{PASSWORD}".encode()).decode()),
    ({"extra": {"token": TOKEN}}, f"Bearer {TOKEN}"),
], ids=["basic", "token"])
def test_credentials_reach_requests_but_never_the_environment(monkeypatch, mlflow_endpoint, fields, header):
    _connection(monkeypatch, "ml_registry_sec", mlflow_endpoint, **fields)
    before = dict(os.environ)

    hook = ModelRegistryHook("ml_registry_sec")
    assert hook.experiment_id("exp") == "42"
    assert PASSWORD not in repr(hook.settings()) and TOKEN not in repr(hook.settings())

    (request,) = [r for r in _Recorder.seen if "get-by-name" in r["path"]]
    assert request["authorization"] == header
    for environ in (request["environ"], dict(os.environ)):  # during the call, and after it
        changed = _changes(before, environ)
        assert set(changed) <= URI_NAMES, f"the hook changed the environment: {sorted(changed)}"
        assert not [v for v in changed.values() if PASSWORD in v or TOKEN in v]
    assert not {"MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME"} & set(os.environ)


def test_requests_outside_the_hook_carry_no_credentials(monkeypatch, mlflow_endpoint):
    _connection(monkeypatch, "ml_registry_sec", mlflow_endpoint, login="reg-user", password=PASSWORD)
    hook = ModelRegistryHook("ml_registry_sec")
    hook.experiment_id("exp")
    from mlflow import MlflowClient

    MlflowClient(f"http://127.0.0.1:{mlflow_endpoint}").get_experiment_by_name("exp")
    assert [r["authorization"] for r in _Recorder.seen if "get-by-name" in r["path"]] == [
        _Recorder.seen[0]["authorization"], None]


def test_credentials_inside_the_tracking_uri_are_refused(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_ML_REGISTRY_URI_CREDS", json.dumps(
        {"conn_type": "ml_registry", "host": f"http://admin:{PASSWORD}@mlflow:5000"}))
    with pytest.raises(ValueError, match="host holds credentials") as raised:
        ModelRegistryHook("ml_registry_uri_creds").settings()
    assert PASSWORD not in str(raised.value)
