"""Elastic rendering and preemption retries against a real kube-apiserver (the test plays the operators)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from kube_cluster import NOBODY_TOKEN, TOKEN, TRAINER_TOKEN, resource_path
from mpi_operator import worker_labels

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.kubernetes.pod_template import ROLE_LABEL
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.preemption import PREEMPTIONS_ENV, RESUME_ENV
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.labels import JOB_NAME as JOB_NAME_LABEL
from airflow_ml_provider.labels import PREEMPTIONS as PREEMPTIONS_LABEL
from support import REPO, wait_for

pytestmark = pytest.mark.integration

IDENTITY = JobIdentity("elastic", "train", "manual__1")
ELASTIC = TrainingJobSpec(framework="horovod", command=["python", "-m", "train"], num_workers=2, min_workers=1,
                          max_workers=4, image="img:1")
CHECKPOINT = '{"event": "checkpoint", "epoch": 2, "step": 44, "path": "/ckpt/ckpt-000002.npz"}'


def _container(obj: dict, *path: str) -> dict:
    for key in path:
        obj = obj[key]
    return obj["template"]["spec"]["containers"][0]


def _env(container: dict) -> dict[str, str]:
    return {item["name"]: item.get("value") for item in container["env"]}


# The shipped identity of an elastic job's pods, and the selector of an MPIJob's workers (mpijob.WORKER_SELECTOR)
POD_DISCOVERY = REPO / "deploy" / "kubernetes" / "pod-discovery.yaml"
MPI_WORKERS = ("training.kubeflow.org/operator-name=mpi-operator,training.kubeflow.org/job-name={name},"
               "training.kubeflow.org/job-role=worker")


def test_an_elastic_mpijob_runs_horovodrun_with_bounds_and_the_pod_discovery(kube_cluster, namespace):
    jobs = get_backend("mpijob", api_client=kube_cluster.api_client(), namespace=namespace)
    spec = TrainingJobSpec(framework="horovod", command=["python", "-m", "train"], num_workers=2, min_workers=1,
                           max_workers=4, image="img:1", kubernetes={"service_account": "airflow-ml-launcher"})
    jobs.submit(IDENTITY.name, spec, IDENTITY.labels())
    stored = jobs.get("MPIJob", IDENTITY.name)  # what the API server kept after schema validation and pruning
    replicas = stored["spec"]["mpiReplicaSpecs"]
    launcher = _container(replicas, "Launcher")
    discovery = ("python -m airflow_ml_provider.runtime.pod_discovery --selector "
                 f"{MPI_WORKERS.format(name=IDENTITY.name)} --slots 1")
    assert launcher["command"] == ["horovodrun", "-np", "2", "--min-np", "1", "--max-np", "4",
                                   "--host-discovery-script", discovery,
                                   "--gloo-timeout-seconds", "120", "--slots-per-host", "1",
                                   "--start-timeout", "120", "python", "-m", "train"]
    # the launcher runs as the service account that may list pods (deploy/kubernetes/pod-discovery.yaml), as does
    # every pod of the job
    assert {replicas[role]["template"]["spec"]["serviceAccountName"] for role in replicas} == {"airflow-ml-launcher"}
    # max_workers pods, the launcher started at once (tests/unit/jobs/backends/test_controller_behaviour.py)
    assert replicas["Worker"]["replicas"] == 4 and stored["spec"]["launcherCreationPolicy"] == "AtStartup"


def _shipped_pod_discovery(kube_cluster, namespace: str) -> dict:
    """deploy/kubernetes/pod-discovery.yaml applied to ``namespace`` (the API server validates each object);
    its Role returned."""
    kinds = {"ServiceAccount": "/api/v1", "Role": "/apis/rbac.authorization.k8s.io/v1",
             "RoleBinding": "/apis/rbac.authorization.k8s.io/v1"}
    docs = list(yaml.safe_load_all(POD_DISCOVERY.read_text()))
    assert sorted(doc["kind"] for doc in docs) == sorted(kinds)
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects", []):
            subject["namespace"] = namespace
        plural = {"ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding": "rolebindings"}[doc["kind"]]
        kube_cluster.request("POST", f"{kinds[doc['kind']]}/namespaces/{namespace}/{plural}", doc)
    return next(doc for doc in docs if doc["kind"] == "Role")


def _allowed(kube_cluster, namespace: str, user: str, verb: str) -> bool:
    """The API server's RBAC answer for ``user`` doing ``verb`` on pods in ``namespace`` (a SubjectAccessReview)."""
    review = kube_cluster.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "resourceAttributes": {"namespace": namespace, "verb": verb, "resource": "pods"}}})
    return review["status"].get("allowed", False)


def _run_discovery(kube_cluster, command: str, namespace: str, token: str, account: Path):
    """The launcher's --host-discovery-script as its pod runs it: with the pod's service account token, namespace
    and CA at the kubelet's mount (here ``account``) and the API server's address in the environment."""
    account.mkdir(exist_ok=True)
    (account / "token").write_text(token)
    (account / "namespace").write_text(namespace)
    (account / "ca.crt").write_bytes((kube_cluster.workdir / "certs" / "apiserver.crt").read_bytes())
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "airflow_ml_provider.runtime.pod_discovery"]
    url = urlparse(kube_cluster.url)
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": url.hostname, "KUBERNETES_SERVICE_PORT": str(url.port)}
    return subprocess.run([sys.executable, *argv[1:], "--service-account-dir", str(account)], env=env,
                          capture_output=True, text=True, timeout=60)


def test_an_elastic_mpijob_s_launcher_lists_its_workers_only_once_they_are_ready(kube_cluster, namespace, tmp_path):
    """The operator's discover_hosts.sh lists every Running worker (mpi_job_controller.go:846), also one whose sshd
    does not listen yet; the rendered launcher's discovery, run as a user holding exactly the shipped Role, lists
    this job's worker pods once Ready, as the operator labels them (tests/mpi_operator.py ``worker_labels``)."""
    role = _shipped_pod_discovery(kube_cluster, namespace)
    launcher_account = f"system:serviceaccount:{namespace}:airflow-ml-launcher"
    assert _allowed(kube_cluster, namespace, launcher_account, "list")  # the shipped binding: list, nothing more
    assert not any(_allowed(kube_cluster, namespace, launcher_account, verb) for verb in
                   ("get", "watch", "create", "update", "patch", "delete", "deletecollection"))
    kube_cluster.grant(namespace, "trainer", role["rules"])  # the harness's tokens are users: one holding the Role
    jobs = get_backend("mpijob", api_client=kube_cluster.api_client(), namespace=namespace)
    jobs.submit(IDENTITY.name, ELASTIC, IDENTITY.labels())
    stored = jobs.get("MPIJob", IDENTITY.name)
    command = _container(stored["spec"]["mpiReplicaSpecs"], "Launcher")["command"]
    discovery = command[command.index("--host-discovery-script") + 1]

    pods, name = f"/api/v1/namespaces/{namespace}/pods", IDENTITY.name
    other = {**stored, "metadata": {**stored["metadata"], "name": "other-job"}}
    launcher_labels = {**stored["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"]["labels"],
                       "training.kubeflow.org/operator-name": "mpi-operator",  # newLauncherPodTemplate :1564-1566
                       "training.kubeflow.org/job-name": name, "training.kubeflow.org/job-role": "launcher"}
    cases = [  # pod, labels, phase, Ready
        (f"{name}-worker-0", worker_labels(stored, 0), "Running", "True"),
        (f"{name}-worker-1", worker_labels(stored, 1), "Running", "False"),  # sshd not listening: its probe fails
        (f"{name}-worker-2", worker_labels(stored, 2), "Pending", "False"),
        (f"{name}-worker-3", worker_labels(stored, 3), "Running", "True"),
        (f"{name}-launcher", launcher_labels, "Running", "True"),
        ("other-job-worker-0", worker_labels(other, 0), "Running", "True"),  # another MPIJob's worker
    ]
    for pod, labels, phase, ready in cases:  # newWorker's hostname and subdomain (:1486-1487)
        kube_cluster.request("POST", pods, _pod(namespace, pod, labels, hostname=pod, subdomain=name))
        kube_cluster.patch_status(f"{pods}/{pod}", {"phase": phase, "podIP": "10.0.0.5",
                                                    "conditions": [{"type": "Ready", "status": ready}]})
    listed = _run_discovery(kube_cluster, discovery, namespace, TRAINER_TOKEN, tmp_path / "serviceaccount")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == [f"{name}-worker-0.{name}:1", f"{name}-worker-3.{name}:1"]
    kube_cluster.patch_status(f"{pods}/{name}-worker-1", {"conditions": [{"type": "Ready", "status": "True"}]})
    listed = _run_discovery(kube_cluster, discovery, namespace, TRAINER_TOKEN, tmp_path / "serviceaccount")
    assert listed.stdout.split() == [f"{name}-worker-{i}.{name}:1" for i in (0, 1, 3)]
    # a launcher whose service account may not list pods fails its first discovery, and says why
    refused = _run_discovery(kube_cluster, discovery, namespace, NOBODY_TOKEN, tmp_path / "nobody")
    assert refused.returncode == 1 and "needs 'list' on pods" in refused.stderr, refused.stderr


def test_an_elastic_volcano_job_gangs_the_minimum_and_discovers_ready_worker_pods(kube_cluster, namespace):
    jobs = get_backend("volcano", api_client=kube_cluster.api_client(), namespace=namespace)
    jobs.submit(IDENTITY.name, ELASTIC, IDENTITY.labels())
    stored = jobs.get("Job", IDENTITY.name)
    assert stored["spec"]["minAvailable"] == 2  # the master and min_workers=1 worker
    master = stored["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    selector = f"{JOB_NAME_LABEL}={IDENTITY.name},{ROLE_LABEL}=worker"
    assert master["command"][:8] == ["horovodrun", "-np", "2", "--min-np", "1", "--max-np", "4",
                                     "--host-discovery-script"], "an elastic master starts at once: no ssh gate"
    assert master["command"][8] == ("python -m airflow_ml_provider.runtime.pod_discovery --selector "
                                    f"{selector} --slots 1")
    assert master["command"][9:11] == ["--gloo-timeout-seconds", "120"]  # a joining worker's start-up fits


def _pod(namespace: str, name: str, labels: dict, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"containers": [{"name": "worker", "image": "img:1"}], **spec}}


def test_pod_discovery_lists_the_ready_worker_pods_that_are_not_being_deleted(kube_cluster, namespace, tmp_path):
    pods = f"/api/v1/namespaces/{namespace}/pods"
    worker = {JOB_NAME_LABEL: "job-a", ROLE_LABEL: "worker"}
    cases = [  # name, labels, phase, Ready, pod IP, extra spec
        ("w-0", worker, "Running", "True", "10.0.0.5", {}),
        ("w-1", worker, "Running", "True", "10.0.0.6", {"hostname": "job-a-worker-1", "subdomain": "job-a"}),
        ("w-2", worker, "Pending", "False", None, {}),
        ("w-3", worker, "Running", "True", "10.0.0.8", {}),  # evicted below: deleting, held by a finalizer
        ("w-4", worker, "Running", "False", "10.0.0.11", {}),  # its sshd not listening yet: the probe fails
        ("launcher", {JOB_NAME_LABEL: "job-a", ROLE_LABEL: "launcher"}, "Running", "True", "10.0.0.9", {}),
        ("other", {JOB_NAME_LABEL: "job-b", ROLE_LABEL: "worker"}, "Running", "True", "10.0.0.10", {}),
    ]
    for name, labels, phase, ready, ip, spec in cases:
        pod = _pod(namespace, name, labels, **spec)
        if name == "w-3":
            pod["metadata"]["finalizers"] = ["example.com/hold"]
        kube_cluster.request("POST", pods, pod)
        kube_cluster.patch_status(f"{pods}/{name}", {"phase": phase, **({"podIP": ip} if ip else {}),
                                                     "conditions": [{"type": "Ready", "status": ready}]})
    kube_cluster.request("DELETE", f"{pods}/w-3")

    account = tmp_path / "serviceaccount"  # what Kubernetes mounts into the launcher pod
    account.mkdir()
    (account / "token").write_text(TOKEN)
    (account / "namespace").write_text(namespace)
    (account / "ca.crt").write_bytes((kube_cluster.workdir / "certs" / "apiserver.crt").read_bytes())
    url = urlparse(kube_cluster.url)
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": url.hostname, "KUBERNETES_SERVICE_PORT": str(url.port)}
    try:
        out = subprocess.run(
            [sys.executable, "-m", "airflow_ml_provider.runtime.pod_discovery", "--selector",
             f"{JOB_NAME_LABEL}=job-a,{ROLE_LABEL}=worker", "--slots", "2", "--service-account-dir", str(account)],
            env=env, capture_output=True, text=True, check=True)
        assert out.stdout.split() == ["10.0.0.5:2", "job-a-worker-1.job-a:2"]
    finally:
        kube_cluster.request("PATCH", f"{pods}/w-3", {"metadata": {"finalizers": None}},
                             "application/merge-patch+json")


def _mpijobs(kube_cluster, namespace: str) -> list[dict]:
    return kube_cluster.request("GET", resource_path("kubeflow.org/v2beta1", "MPIJob", namespace))["items"]


def _play_mpi_operator(kube_cluster, kubelet, namespace: str, failure: dict, seen: list[dict]) -> None:
    """Run the first MPIJob's launcher (which reports a checkpoint), then fail it with ``failure``; for an
    eviction, wait for the job to come back as a new object and let that one succeed. Every MPIJob seen
    is appended to ``seen``."""
    listing = resource_path("kubeflow.org/v2beta1", "MPIJob", namespace)
    first = wait_for(lambda: next(iter(_mpijobs(kube_cluster, namespace)), None), what="the MPIJob")
    seen.append(first)
    name = first["metadata"]["name"]
    launcher = _pod(namespace, f"{name}-launcher", first["metadata"]["labels"], nodeName="fake-node")
    kube_cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", launcher)
    kubelet.append(namespace, f"{name}-launcher", "worker", CHECKPOINT)
    kube_cluster.patch_status(f"{listing}/{name}", {"conditions": [
        {"type": "Running", "status": "True", "lastTransitionTime": "2026-11-21T00:00:00Z"},
        {**failure, "type": "Failed", "status": "True", "lastTransitionTime": "2026-11-21T00:01:00Z"}]})
    if failure["reason"] != "MPIJobEvicted":
        return
    uid = first["metadata"]["uid"]
    again = wait_for(lambda: next((job for job in _mpijobs(kube_cluster, namespace)
                                   if job["metadata"]["uid"] != uid), None), timeout=60, what="a resubmission")
    seen.append(again)
    kubelet.append(namespace, f"{name}-launcher", "worker", '{"event": "result", "accuracy": 0.95}')
    kube_cluster.patch_status(f"{listing}/{name}", {"conditions": [
        {"type": "Succeeded", "status": "True", "lastTransitionTime": "2026-11-21T00:02:00Z"}]})


def test_an_evicted_mpijob_is_resubmitted_with_its_resume_point(kube_cluster, kubelet, namespace, run_dag, capfd):
    seen: list[dict] = []
    evicted = {"reason": "MPIJobEvicted", "message": f"MPIJob {namespace}/x is evicted"}
    operator = threading.Thread(target=_play_mpi_operator, args=(kube_cluster, kubelet, namespace, evicted, seen),
                                daemon=True)
    operator.start()
    result = run_dag("ml_test_mpijob_evicted")
    operator.join(10)
    assert result.state == "success", result.task_states
    first, second = seen
    launcher = _container(second["spec"]["mpiReplicaSpecs"], "Launcher")
    assert _env(launcher)[RESUME_ENV] == "/ckpt/ckpt-000002.npz"
    assert _env(launcher)[PREEMPTIONS_ENV] == "1"
    assert second["metadata"]["labels"][PREEMPTIONS_LABEL] == "1"
    assert RESUME_ENV not in _env(_container(first["spec"]["mpiReplicaSpecs"], "Launcher"))
    assert "resuming from checkpoint /ckpt/ckpt-000002.npz at step 44, epoch 2" in capfd.readouterr().out


def test_an_mpijob_failed_by_user_code_is_not_resubmitted(kube_cluster, kubelet, namespace, run_dag):
    seen: list[dict] = []
    failed = {"reason": "MPIJobFailed", "message": "launcher exited with code 1"}
    operator = threading.Thread(target=_play_mpi_operator, args=(kube_cluster, kubelet, namespace, failed, seen),
                                daemon=True)
    operator.start()
    result = run_dag("ml_test_mpijob_user_failure")
    operator.join(10)
    assert result.task_states["train"] == "failed"
    [job] = _mpijobs(kube_cluster, namespace)
    assert job["metadata"]["uid"] == seen[0]["metadata"]["uid"], "a user failure must not be resubmitted"
    assert PREEMPTIONS_LABEL not in job["metadata"]["labels"]
