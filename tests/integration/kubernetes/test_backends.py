"""The three Kubernetes backends against a real kube-apiserver with the real MPIJob and Volcano CRDs."""

from __future__ import annotations

import pytest
from kube_cluster import resource_path

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.base import JobNotFound, JobSubmissionError
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import TrainingJobSpec

pytestmark = pytest.mark.integration

IDENTITY = JobIdentity("pipeline", "train", "manual__2026-11-21T00:00:00+00:00")
KUBERNETES = {
    "node_selector": {"pool": "gpu"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "image_pull_secrets": ["registry"],
    "service_account": "trainer",
    "secret_env": {"WANDB_API_KEY": {"secret": "wandb", "key": "api-key"}},
    "volumes": [{"name": "data", "mount_path": "/data", "claim": "datasets", "read_only": True}],
    "backoff_limit": 2,
    "active_deadline_seconds": 3600,
}
QUEUED = {"queue": "research", "priority_class": "high"}


def spec(framework: str, **overrides) -> TrainingJobSpec:
    return TrainingJobSpec(**{
        "framework": framework, "command": ["python", "-m", "train", "--lr", "0.1"], "num_workers": 2,
        "image": "registry.example/train:1",
        "resources": {"cpu": 4, "memory": "16Gi", "gpu": 1, "gpu_type": "NVIDIA-A100-SXM4-80GB"},
        "scheduling": {"priority_class": "high"}, "kubernetes": KUBERNETES, "env": {"EPOCHS": "3"}, "timeout_s": 1800, **overrides})


def backend(kind: str, kube_cluster, namespace: str):
    return get_backend(kind, api_client=kube_cluster.api_client(), namespace=namespace)


def containers(template: dict) -> list[dict]:
    return template["spec"]["containers"]


@pytest.mark.parametrize("kind,framework", [("mpijob", "horovod"), ("volcano", "horovod"), ("volcano", "lightgbm"),
                                            ("volcano", "pytorch"), ("indexed-job", "lightgbm"),
                                            ("indexed-job", "pytorch"), ("volcano", "xgboost"),
                                            ("indexed-job", "xgboost")])
def test_manifests_are_accepted_by_the_real_schemas_and_keep_every_field(kind, framework, kube_cluster, namespace):
    jobs = backend(kind, kube_cluster, namespace)
    name = IDENTITY.name
    queued = {} if kind == "indexed-job" else {"scheduling": QUEUED}  # a plain Job has no queues
    assert jobs.submit(name, spec(framework, **queued), IDENTITY.labels()) is True
    stored = jobs.get(jobs.kind, name)
    assert stored["metadata"]["labels"] == IDENTITY.labels()
    if kind == "mpijob":
        body = stored["spec"]
        assert body["slotsPerWorker"] == 1 and body["launcherCreationPolicy"] == "WaitForWorkersReady"
        assert body["runPolicy"]["schedulingPolicy"] == {"minAvailable": 3, "queue": "research", "priorityClass": "high"}
        assert body["runPolicy"]["cleanPodPolicy"] == "Running" and body["runPolicy"]["backoffLimit"] == 2
        assert body["runPolicy"]["activeDeadlineSeconds"] == 1800, "timeout_s, tighter than the option's 3600"
        launcher = containers(body["mpiReplicaSpecs"]["Launcher"]["template"])[0]
        assert launcher["command"][:7] == ["horovodrun", "-np", "2", "--hostfile", "/etc/mpi/hostfile",
                                           "--start-timeout", "120"]
        worker_pod = body["mpiReplicaSpecs"]["Worker"]["template"]
        # the probe the API server kept: WaitForWorkersReady then waits for sshd to listen, not for it to start
        assert containers(worker_pod)[0]["readinessProbe"]["tcpSocket"] == {"port": 22}
    elif kind == "volcano":
        body = stored["spec"]
        assert body["queue"] == "research" and body["priorityClassName"] == "high"
        # an evicted pod stops the job (the provider resubmits it); backoff_limit 2: two restarts after a crash
        assert body["policies"] == [{"event": "PodEvicted", "action": "AbortJob"}] and body["maxRetry"] == 3
        assert {"event": "PodFailed", "action": "RestartJob"} in body["tasks"][0]["policies"]
        assert body["minAvailable"] == (3 if framework == "horovod" else 2)
        assert set(body["plugins"]) == {"horovod": {"ssh", "svc"}, "pytorch": {"pytorch", "svc"}}.get(framework,
                                                                                                  {"svc", "env"})
        worker_pod = next(t for t in body["tasks"] if t["name"] == "worker")["template"]
        if framework == "horovod":  # the master waits for the workers' sshd, then runs horovodrun
            master = containers(next(t for t in body["tasks"] if t["name"] == "master")["template"])[0]
            workers = f"{name}-worker-0.{name}:1,{name}-worker-1.{name}:1"
            assert master["command"][:6] == ["python", "-m", "airflow_ml_provider.runtime.ssh_gate", workers, "--",
                                             "horovodrun"]
            assert containers(worker_pod)[0]["readinessProbe"]["tcpSocket"] == {"port": 22}
        assert "activeDeadlineSeconds" not in body, "the Job CRD has no job-level deadline"
        assert {task["template"]["spec"]["activeDeadlineSeconds"] for task in body["tasks"]} == {1800}
    else:
        body = stored["spec"]
        assert body["completions"] == 2 and body["parallelism"] == 2 and body["backoffLimit"] == 2
        assert body["activeDeadlineSeconds"] == 1800 and "queue" not in str(body)
        worker_pod = body["template"]
        assert worker_pod["spec"]["subdomain"] == name
        service = jobs.get("Service", name, "v1")
        assert service["spec"]["clusterIP"] == "None"
        if framework == "pytorch":  # one torchrun agent a pod, static rendezvous at pod 0's stable name (F5)
            command = containers(worker_pod)[0]["command"]
            assert command[0] == "torchrun" and command[command.index("--master-addr") + 1] == f"{name}-0.{name}"
            assert (command[command.index("--master-port") + 1], command[command.index("--node-rank") + 1]) == (
                "29400", "$(JOB_COMPLETION_INDEX)")
            assert service["spec"]["ports"][0]["port"] == 29400
        if framework == "xgboost":  # the tracker beside pod 0, at its stable name, the rank the completion index
            command = containers(worker_pod)[0]["command"]
            assert command[:4] == ["python", "-m", "airflow_ml_provider.runtime.xgboost_tracker", "worker"]
            assert command[command.index("--task-id") + 1] == "$(JOB_COMPLETION_INDEX)"
            env = {e["name"]: e.get("value") for e in containers(worker_pod)[0]["env"]}
            assert (env["DMLC_TRACKER_URI"], env["DMLC_TRACKER_PORT"], env["DMLC_NUM_WORKER"]) == (f"{name}-0.{name}",
                                                                                                 "9091", "2")
            assert service["spec"]["ports"][0]["port"] == 9091
    pod = worker_pod["spec"]
    worker = containers(worker_pod)[0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["nodeSelector"] == {"pool": "gpu", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert pod["priorityClassName"] == "high"
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu" and pod["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["serviceAccountName"] == "trainer" and pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "datasets"
    # the default Pod Security Standard, baseline, as the schema keeps it (tests/unit/jobs/backends/test_pod_security.py)
    # sshd's pods (MPIJob, Volcano's Horovod) run as root; every other pod as the image's user
    root = {"runAsUser": 0, "runAsGroup": 0} if framework == "horovod" else {}
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}, **root}
    assert worker["securityContext"] == {"allowPrivilegeEscalation": False}
    secret = next(e for e in worker["env"] if e["name"] == "WANDB_API_KEY")
    assert secret == {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}}


def test_a_schema_violation_is_refused_with_the_api_servers_message(kube_cluster, namespace, monkeypatch):
    jobs = backend("mpijob", kube_cluster, namespace)
    good = jobs.manifests

    def broken(*args):
        manifest = good(*args)
        manifest[0]["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = "two"
        return manifest

    monkeypatch.setattr(jobs, "manifests", broken)
    with pytest.raises(JobSubmissionError, match=r"replicas"):
        jobs.submit("invalid", spec("horovod"), IDENTITY.labels())
    with pytest.raises(JobNotFound):
        jobs.status("invalid")


def test_submitting_again_attaches_while_active_and_replaces_once_finished(kube_cluster, namespace):
    jobs = backend("mpijob", kube_cluster, namespace)
    name = IDENTITY.name
    assert jobs.submit(name, spec("horovod"), IDENTITY.labels()) is True
    first_uid = jobs.get("MPIJob", name)["metadata"]["uid"]
    assert jobs.submit(name, spec("horovod"), IDENTITY.labels()) is False
    listing = kube_cluster.request("GET", resource_path("kubeflow.org/v2beta1", "MPIJob", namespace))
    assert [item["metadata"]["uid"] for item in listing["items"]] == [first_uid], "submitted twice"

    path = resource_path("kubeflow.org/v2beta1", "MPIJob", namespace, name)
    kube_cluster.patch_status(path, {"conditions": [
        {"type": "Succeeded", "status": "True", "reason": "MPIJobSucceeded", "lastTransitionTime": "2026-11-21T00:00:00Z"}]})
    assert jobs.submit(name, spec("horovod"), IDENTITY.labels()) is True
    assert jobs.get("MPIJob", name)["metadata"]["uid"] != first_uid


def test_cancel_deletes_the_job_and_its_service_and_status_then_reports_not_found(kube_cluster, namespace):
    jobs = backend("indexed-job", kube_cluster, namespace)
    jobs.submit("gbm", spec("lightgbm"), IDENTITY.labels())
    jobs.cancel("gbm")
    with pytest.raises(JobNotFound):
        jobs.status("gbm")
    with pytest.raises(JobNotFound):
        jobs.get("Service", "gbm", "v1")


@pytest.mark.parametrize("kind,framework,takers", [("mpijob", "lightgbm", "local, volcano, indexed-job"),
                                                   ("indexed-job", "horovod", "local, mpijob, volcano"),
                                                   ("mpijob", "pytorch", "local, volcano, indexed-job, trainjob"),
                                                   ("mpijob", "xgboost", "local, volcano, indexed-job, trainjob"),
                                                   ("trainjob", "lightgbm", "local, volcano, indexed-job")])
def test_frameworks_a_backend_cannot_run_are_refused_before_any_call(kind, framework, takers, kube_cluster, namespace):
    with pytest.raises(JobSubmissionError, match=f"framework: .*not '{framework}'; backends that run it: {takers}$"):
        backend(kind, kube_cluster, namespace).submit("x", spec(framework), {})
