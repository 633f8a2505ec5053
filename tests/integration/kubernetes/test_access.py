"""Refusals by the real API server end a wait at once with its message; hostile names never reach it."""

from __future__ import annotations

import asyncio
import json

import pytest
from kube_cluster import NOBODY_TOKEN, ApiError, new_namespace

from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.base import BackendAccessError
from airflow_ml_provider.jobs.backends.kubernetes.rest import object_path
from airflow_ml_provider.jobs.spec import TrainingJobSpec

pytestmark = pytest.mark.integration

SPEC = TrainingJobSpec(framework="horovod", command=["python", "t.py"], num_workers=2, image="img:1")
HOSTILE = "../../api/v1/namespaces/kube-system/secrets/admin-token"
KINDS = ["mpijob", "volcano", "indexed-job"]


async def _follow(backend, name: str) -> None:
    async for _ in backend.statuses(name, interval=1.0):
        pass


@pytest.fixture
def unauthorized_namespace(kube_cluster, monkeypatch) -> str:
    """A namespace whose connection authenticates as a user with no RBAC binding at all."""
    return new_namespace(kube_cluster, monkeypatch, kube_cluster.kubeconfig_for(NOBODY_TOKEN))


@pytest.mark.parametrize("kind,resource,group", [("mpijob", "mpijobs", "kubeflow.org"),
                                                 ("volcano", "jobs", "batch.volcano.sh"),
                                                 ("indexed-job", "jobs", "batch")])
def test_a_watch_without_permission_ends_the_wait_naming_the_permission(kind, resource, group, unauthorized_namespace):
    backend = TrainingBackendHook().get_backend(kind)  # as a follower builds it: from the connection
    with pytest.raises(BackendAccessError) as refused:
        asyncio.run(asyncio.wait_for(_follow(backend, "aml-train-1"), 60))  # bounded: never a hang
    assert f'cannot list resource "{resource}" in API group "{group}"' in str(refused.value)
    assert unauthorized_namespace in str(refused.value)


def test_status_submit_and_logs_without_permission_are_access_errors_naming_the_verb(unauthorized_namespace):
    backend = TrainingBackendHook().get_backend("mpijob")
    with pytest.raises(BackendAccessError, match='cannot get resource "mpijobs"'):
        backend.status("aml-train-1")
    with pytest.raises(BackendAccessError, match='cannot create resource "mpijobs"'):
        backend.submit("aml-train-1", SPEC, {})
    with pytest.raises(BackendAccessError, match='cannot list resource "pods"'):
        backend.log_source("aml-train-1").read()


def test_hostile_names_are_refused_before_any_request(kube_cluster, namespace, monkeypatch):
    """Issue 12, item 3: a templated job name with ``../`` once made urllib3 send
    ``DELETE /api/v1/namespaces/kube-system/secrets/admin-token``."""
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "admin-token"}, "stringData": {"t": "x"}}
    kube_cluster.request("POST", "/api/v1/namespaces/kube-system/secrets", secret)
    try:
        api = kube_cluster.api_client()
        sent = []
        real = api.call_api
        monkeypatch.setattr(api, "call_api", lambda path, method, *a, **k: sent.append((method, path)) or real(
            path, method, *a, **k))
        for kind in KINDS:
            jobs = get_backend(kind, api_client=api, namespace=namespace)
            framework = "lightgbm" if kind == "indexed-job" else "horovod"
            spec = SPEC.model_copy(update={"framework": framework})
            for action in (lambda: jobs.submit(HOSTILE, spec, {}), lambda: jobs.render(HOSTILE, spec, {}),
                           lambda: jobs.status(HOSTILE), lambda: jobs.cancel(HOSTILE), lambda: jobs.delete(HOSTILE),
                           lambda: jobs.log_source(HOSTILE), lambda: asyncio.run(_follow(jobs, HOSTILE))):
                with pytest.raises(Exception, match="job_name: .* is not a DNS-1123 label"):
                    action()
            with pytest.raises(ValueError, match="namespace: .* is not a DNS-1123 label"):
                get_backend(kind, api_client=api, namespace="kube-system/secrets/admin-token")
        assert sent == [], "nothing was sent for a refused name"

        # and were a name to slip past the check, the client quotes path parameters: it stays one segment
        jobs = get_backend("indexed-job", api_client=api, namespace=namespace)
        with pytest.raises(Exception) as answer:
            jobs._call("DELETE", object_path("v1", "Service"), name=HOSTILE)
        assert getattr(answer.value, "status", None) in (400, 404)
        assert kube_cluster.request("GET", "/api/v1/namespaces/kube-system/secrets/admin-token")["metadata"]["name"]
    finally:
        try:
            kube_cluster.request("DELETE", "/api/v1/namespaces/kube-system/secrets/admin-token")
        except ApiError:
            pass


def test_a_namespace_from_the_connection_is_checked_too(kube_cluster, monkeypatch):
    kube = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kube_cluster.kubeconfig),
                                                 "namespace": "default/../kube-system"}}
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(kube))
    with pytest.raises(ValueError, match="namespace: 'default/../kube-system' is not a DNS-1123 label"):
        TrainingBackendHook().get_backend("mpijob")


def test_a_deferred_training_task_fails_for_good_within_60_s_naming_the_permission(unauthorized_namespace):
    """The whole path a deferred task takes: the trigger follows through the core, which turns the
    watch's refusal into a final, non-retryable failure carrying the API server's message."""
    from airflow_ml_provider.triggers.training_job import TrainingJobTrigger

    async def first_event():
        trigger = TrainingJobTrigger("aml-train-1", "mpijob", stream_logs=False, options={"poll_interval": 1.0})
        async for event in trigger.run():
            return event.payload

    payload = asyncio.run(asyncio.wait_for(first_event(), 60))
    assert payload["action"] == "fail" and payload["retryable"] is False
    assert 'cannot list resource "mpijobs" in API group "kubeflow.org"' in payload["message"]
