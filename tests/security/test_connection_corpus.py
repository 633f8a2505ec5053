"""Hostile connection settings: refused naming the field, without echoing a secret.

Connections are edited by administrators, but their values reach URLs, request headers and API paths;
issue 12, item 4 (registry credentials in os.environ) and item 9 (the search storage derived from the
metadata database's URL, password included).
"""

from __future__ import annotations

import json

import pytest

from airflow_ml_provider.hooks.model_registry import ModelRegistryHook
from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.search.study import masked, open_storage

SECRET = "c0nn-s3cret"
KUBECONFIG = {  # a cluster nothing listens for: building a backend makes no request
    "apiVersion": "v1", "kind": "Config", "current-context": "c",
    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    "users": [{"name": "u", "user": {"token": "t"}}],
}

# (case, connection fields, the refusal's text)
REGISTRY_REFUSED = [
    ("credentials_in_the_host_uri", {"host": f"http://admin:{SECRET}@mlflow:5000"}, "host holds credentials"),
    ("credentials_in_the_registry_uri", {"host": "mlflow", "extra": {"registry_uri": f"https://u:{SECRET}@reg"}},
     "extra.registry_uri holds credentials"),
    ("header_injection_in_the_token", {"host": "mlflow", "extra": {"token": f"{SECRET}\r\nX-Admin: 1"}},
     "extra.token contains a line break or NUL"),
    ("header_injection_in_the_password", {"host": "mlflow", "login": "u", "password": f"{SECRET}\nX-Admin: 1"},
     "password contains a line break or NUL"),
    ("nul_in_the_login", {"host": "mlflow", "login": "u\x00", "password": SECRET}, "login contains a line break or NUL"),
]


@pytest.mark.parametrize(("fields", "message"), [case[1:] for case in REGISTRY_REFUSED],
                         ids=[case[0] for case in REGISTRY_REFUSED])
def test_hostile_registry_connection_is_refused_without_echoing_secrets(monkeypatch, fields, message):
    monkeypatch.setenv("AIRFLOW_CONN_ML_REGISTRY_CORPUS", json.dumps({"conn_type": "ml_registry", **fields}))
    with pytest.raises(ValueError) as raised:
        ModelRegistryHook("ml_registry_corpus").settings()
    assert str(raised.value) == f"connection 'ml_registry_corpus': {message}" + (
        "; put them in login/password or the token extra" if "holds credentials" in message else "")
    assert SECRET not in str(raised.value)


@pytest.mark.parametrize(("extra", "message"), [
    ({"backend": "mpijob", "namespace": "kube-system/../default"}, "namespace: 'kube-system/../default' is not a DNS-1123"),
    ({"backend": "mpijob", "namespace": "default", "gang_scheduler": "../x"}, "gang_scheduler: '../x' is not a DNS-1123"),
    ({"backend": "../../x"}, "backend: unknown backend '../../x'"),
], ids=["namespace_with_a_path", "gang_scheduler_with_a_path", "unknown_backend"])
def test_hostile_training_connection_extras_are_refused_naming_the_field(monkeypatch, extra, message):
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_CORPUS", json.dumps({"conn_type": "ml_training", "extra": extra}))
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config": json.dumps(KUBECONFIG)}}))
    with pytest.raises(ValueError) as raised:
        TrainingBackendHook("ml_training_corpus").get_backend()
    assert message in str(raised.value)


def test_a_search_storage_password_never_appears_in_its_errors():
    url = f"postgresql://optuna:{SECRET}@127.0.0.1:1/optuna"
    with pytest.raises(ValueError) as raised:
        open_storage(url)
    assert SECRET not in str(raised.value) and masked(url) in str(raised.value)
