"""`airflow-ml check --server-dry-run` on the real kube-apiserver with the real CRDs: every manifest is
sent with dryRun=All, so the server's own refusals (its validation, a CRD that is not installed) are
findings with the server's message, a valid job passes, and nothing is ever created; a user holding
only deploy/kubernetes/rbac.yaml's rules can run it."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml
from kube_cluster import TRAINER_TOKEN, new_namespace, resource_path

from airflow_ml_provider.cli import main
from support import REPO

pytestmark = pytest.mark.integration

RBAC = REPO / "deploy" / "kubernetes" / "rbac.yaml"
KINDS = [("kubeflow.org/v2beta1", "MPIJob"), ("batch/v1", "Job"), ("v1", "Service")]


def _dag_file(folder, backend: str, framework: str = "horovod", kubernetes: dict | None = None):
    path = folder / f"dry_run_{backend.replace('-', '_')}.py"
    path.write_text(textwrap.dedent(f"""\
        from airflow.sdk import DAG

        from airflow_ml_provider.operators.training import TrainingJobOperator

        with DAG("dry_run", schedule=None):
            TrainingJobOperator(
                task_id="train",
                framework={framework!r},
                command=["python", "train.py"],
                num_workers=2,
                job={{"image": "registry.example/train:1", "backend": {backend!r},
                     "kubernetes": {kubernetes or {}!r}}},
            )
    """))
    return path


def _check(tmp_path, dag_file, server: str, namespace: str | None = None) -> tuple[int, dict]:
    report = tmp_path / "report.json"
    argv = ["check", str(dag_file), "--server-dry-run", server, "--format", "json", "--output", str(report)]
    code = main(argv + (["--namespace", namespace] if namespace else []))
    [case] = [case for case in json.loads(report.read_text())["cases"] if case["name"] == "train"]
    return code, case


def _nothing_created(cluster, namespace: str) -> None:
    for api_version, kind in KINDS:
        listing = cluster.request("GET", resource_path(api_version, kind, namespace))
        assert [item["metadata"]["name"] for item in listing["items"]] == [], f"a {kind} was created"


@pytest.mark.parametrize("backend,framework", [("mpijob", "horovod"), ("indexed-job", "lightgbm")])
def test_a_valid_job_passes_and_nothing_is_created(backend, framework, kube_cluster, namespace, tmp_path):
    code, case = _check(tmp_path, _dag_file(tmp_path, backend, framework), str(kube_cluster.kubeconfig), namespace)
    assert (code, case["status"]) == (0, "ok"), case
    offline, *answers = case["details"]
    assert "valid offline (Kubernetes 1.29 and 1.37, the pinned CRDs)" in offline, case
    assert answers and all("accepted (dry run, nothing created)" in line for line in answers)
    _nothing_created(kube_cluster, namespace)


def test_a_field_the_server_rejects_fails_with_the_servers_message(kube_cluster, namespace, tmp_path):
    dag_file = _dag_file(tmp_path, "indexed-job", "lightgbm", {"service_account": "Not_A_Valid_Name"})
    code, case = _check(tmp_path, dag_file, str(kube_cluster.kubeconfig), namespace)
    assert (code, case["status"]) == (1, "failed")
    assert "rejected (dry run): 422" in case["message"]
    assert 'spec.template.spec.serviceAccountName: Invalid value: "Not_A_Valid_Name"' in case["message"]
    _nothing_created(kube_cluster, namespace)


@pytest.fixture
def kubeflow_namespace(kubeflow_cluster, monkeypatch) -> str:
    return new_namespace(kubeflow_cluster, monkeypatch)


def test_a_missing_crd_fails_with_the_servers_message(kubeflow_cluster, kubeflow_namespace, tmp_path):
    """The second API server has the MPIJob CRD and no Volcano."""
    dag_file = _dag_file(tmp_path, "volcano")
    code, case = _check(tmp_path, dag_file, str(kubeflow_cluster.kubeconfig), kubeflow_namespace)
    assert (code, case["status"]) == (1, "failed")
    # the server answers a collection it does not serve with a plain "404 page not found"
    assert f"Job {kubeflow_namespace}/" in case["message"]
    assert "rejected (dry run): 404 Not Found (is its CRD installed?)" in case["message"]


def test_a_user_bound_only_to_the_shipped_role_can_dry_run(kube_cluster, monkeypatch, tmp_path):
    """Through a Kubernetes connection id (its kubeconfig authenticates as "trainer", its namespace is used)."""
    namespace = new_namespace(kube_cluster, monkeypatch, kube_cluster.kubeconfig_for(TRAINER_TOKEN))
    [role] = [doc for doc in yaml.safe_load_all(RBAC.read_text()) if doc["kind"] == "Role"]
    kube_cluster.grant(namespace, "trainer", role["rules"])
    for backend, framework in [("mpijob", "horovod"), ("volcano", "horovod"), ("indexed-job", "lightgbm")]:
        code, case = _check(tmp_path, _dag_file(tmp_path, backend, framework), "kubernetes_default")
        assert (code, case["status"]) == (0, "ok"), case
        assert f" {namespace}/" in case["details"][1]  # [0]: the offline validation
    _nothing_created(kube_cluster, namespace)
    unbound = new_namespace(kube_cluster, monkeypatch, kube_cluster.kubeconfig_for(TRAINER_TOKEN))
    code, case = _check(tmp_path, _dag_file(tmp_path, "mpijob"), "kubernetes_default")
    assert (code, case["status"]) == (1, "failed")
    assert '403 mpijobs.kubeflow.org is forbidden: User "trainer" cannot create resource "mpijobs"' in case["message"]
    assert unbound in case["message"]
