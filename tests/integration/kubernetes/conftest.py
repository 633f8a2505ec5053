"""A real kube-apiserver + etcd for the Kubernetes backend tests (skipped, with the reason, without one)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_cluster import (
    CRDS_DIR,
    FakeKubelet,
    KubeCluster,
    _install_crds,
    apiserver_binary,
    new_namespace,
    start_cluster,
)
from trainer_controller import XGBOOST_DISTRIBUTED_FILE, runtimes

SCHEDULER_PLUGINS_CRD = Path(__file__).resolve().parents[2] / "fixtures" / "crds" / "scheduling.x-k8s.io_podgroups.yaml"


def _control_plane():
    binary = apiserver_binary()
    if binary is None:
        pytest.skip("no kube-apiserver/etcd: run `make kube-apiserver` (scripts/build_kube_apiserver.sh)")
    if not (CRDS_DIR / "kubeflow.org_mpijobs.yaml").is_file():
        pytest.skip(f"no verified CRDs in {CRDS_DIR}: run `make crds` (scripts/fetch_crds.py)")
    return binary


@pytest.fixture(scope="session")
def kube_cluster() -> KubeCluster:
    binary = _control_plane()
    cluster = start_cluster(binary)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def kubeflow_cluster() -> KubeCluster:
    """A second API server as most Kubeflow installs are: the MPIJob CRD and no Volcano; with the
    scheduler-plugins PodGroup CRD, for the MPI operator's other gang scheduler."""
    binary = _control_plane()
    cluster = start_cluster(binary, crds=[CRDS_DIR / "kubeflow.org_mpijobs.yaml", SCHEDULER_PLUGINS_CRD])
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
    """A fresh namespace per test on the cluster with every CRD."""
    return new_namespace(kube_cluster, monkeypatch)


TRAINER_CRDS = ["trainer.kubeflow.org_trainjobs.yaml", "trainer.kubeflow.org_clustertrainingruntimes.yaml",
                "trainer.kubeflow.org_trainingruntimes.yaml", "jobset.x-k8s.io_jobsets.yaml"]


@pytest.fixture(scope="session")
def trainer_cluster(kube_cluster) -> KubeCluster:
    """The session's cluster with Kubeflow Trainer v2's and JobSet's CRDs (requirements/crds.lock, next/),
    Trainer's ``torch-distributed`` and ``xgboost-distributed`` ClusterTrainingRuntimes, as Trainer's install
    creates them, and the provider's ``airflow-ml-torch`` and ``airflow-ml-xgboost`` (deploy/kubernetes/, the
    trainjob backend's defaults)."""
    crds = [CRDS_DIR / "next" / name for name in TRAINER_CRDS]
    if not all(crd.is_file() for crd in [*crds, XGBOOST_DISTRIBUTED_FILE]):
        pytest.skip(f"no verified Trainer/JobSet CRDs in {CRDS_DIR / 'next'}: run `make crds`")
    _install_crds(kube_cluster, crds)
    for runtime in runtimes().values():
        kube_cluster.request("POST", "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes", runtime)
    return kube_cluster
