"""Issue 45 D7: with ``kubernetes_default`` pointing at an unreachable API server, a training task logged 19
urllib3 retry warnings and failed with ``TransientApiError ... failed 5 times`` and a traceback, never naming the
connection; and it used namespace ``default`` although the connection's kubeconfig context says ``ml``. Real
kubernetes client, real refused connections (a closed loopback port), real dag.test()."""

from __future__ import annotations

import json

import pytest
import yaml

from airflow_ml_provider.jobs.backends.local.ports import free_ports

pytestmark = pytest.mark.integration


@pytest.fixture
def unreachable(tmp_path, monkeypatch) -> str:
    """``kubernetes_default`` on a kubeconfig whose context (namespace ``ml``) names a closed port; the training
    connection's default backend is indexed-job. Returns the server's URL."""
    (port,) = free_ports(1)
    server = f"https://127.0.0.1:{port}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "team",
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "team", "context": {"cluster": "c", "user": "u", "namespace": "ml"}},
                     {"name": "other", "context": {"cluster": "c", "user": "u", "namespace": "other"}}]}))
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}))
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT", json.dumps(
        {"conn_type": "mltraining", "extra": {"backend": "indexed-job"}}))
    return server


def test_the_namespace_is_the_kubeconfig_contexts_when_the_connections_set_none(unreachable, monkeypatch):
    from airflow_ml_provider.hooks.training_backend import TrainingBackendHook

    backend = TrainingBackendHook().get_backend()
    assert backend.namespace == "ml"
    assert backend.where == f"Kubernetes connection 'kubernetes_default' (server {unreachable}), namespace ml"
    extra = json.loads(__import__("os").environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"])["extra"]
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(
        {"conn_type": "kubernetes", "extra": {**extra, "cluster_context": "other"}}))
    assert TrainingBackendHook().get_backend().namespace == "other", "the connection's chosen context"
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT", json.dumps(
        {"conn_type": "mltraining", "extra": {"backend": "indexed-job", "namespace": "training"}}))
    assert TrainingBackendHook().get_backend().namespace == "training", "the training connection's comes first"


def test_an_unreachable_server_fails_the_task_in_one_line_naming_the_connection_and_server(
    unreachable, run_dag, capfd
):
    result = run_dag("ml_unreachable_cluster_test")
    output = capfd.readouterr()
    said = output.out + output.err
    assert result.task_states["train"] in ("failed", "up_for_retry"), result.task_states
    assert "Retrying (Retry(" not in said, "urllib3's own retries, one warning each"
    expected = (f"train: Kubernetes connection 'kubernetes_default' (server {unreachable}), namespace ml: GET "
                "/apis/batch/v1/namespaces/ml/jobs/")
    line = next((line for line in said.splitlines() if expected in line), None)
    assert line is not None, said[-5000:]
    print(line, "\n", said.count("retrying"), "retry warnings")
    assert "Connection refused" in line and " object at 0x" not in line, line
