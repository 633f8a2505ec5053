"""The tests that run containers of the built training image (``make image``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pod_containers import NAMESPACE, PodNetwork
from training_image import built_image, image_user


@pytest.fixture(scope="session")
def training_image() -> str:
    """The image's name (tests/training_image.py ``built_image``: skips without podman, fails if not built)."""
    return built_image()


@pytest.fixture
def claims(tmp_path, training_image) -> dict[str, Path]:
    """The job's PVC: a folder the image's user owns, as a provisioned volume for that user."""
    work = tmp_path / "work"
    work.mkdir()
    uid, _, gid = image_user(training_image).partition(":")
    os.chown(work, int(uid), int(gid or uid))
    return {"work": work}


@pytest.fixture
def network(training_image):
    """A podman network with DNS for one test's pods, removed with every container on it."""
    pods = PodNetwork(training_image, NAMESPACE)
    yield pods
    pods.close()


@pytest.fixture
def api_server():
    """A kube-apiserver (tests/kube_cluster.py) for the pods of a test that read the API from inside a pod, with
    the image tests' namespace; skipped without one."""
    from kube_cluster import apiserver_binary, start_cluster

    binary = apiserver_binary()
    if binary is None:
        pytest.skip("no kube-apiserver/etcd: run `make kube-apiserver` (scripts/build_kube_apiserver.sh)")
    cluster = start_cluster(binary, crds=[])
    cluster.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": NAMESPACE}})
    yield cluster
    cluster.stop()
