"""A real kube-apiserver + etcd for the Kubernetes backend tests (skipped, with the reason, without one)."""

from __future__ import annotations

import json
import uuid

import pytest
from kube_cluster import FakeKubelet, KubeCluster, apiserver_binary, start_cluster


@pytest.fixture(scope="session")
def kube_cluster() -> KubeCluster:
    binary = apiserver_binary()
    if binary is None:
        pytest.skip("no kube-apiserver/etcd: run `make kube-apiserver` (scripts/build_kube_apiserver.sh)")
    cluster = start_cluster(binary)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def kubelet(kube_cluster) -> FakeKubelet:
    fake = FakeKubelet(kube_cluster.workdir)
    fake.register_node(kube_cluster)
    yield fake
    fake.stop()


@pytest.fixture
def namespace(kube_cluster, monkeypatch) -> str:
    """A fresh namespace per test, and connections pointing Airflow at it (as a user would configure)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    kube_cluster.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": name}})
    kube = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kube_cluster.kubeconfig), "namespace": name}}
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(kube))
    return name
