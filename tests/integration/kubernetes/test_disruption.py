"""Spot and disruption: a pod of the job with a DisruptionTarget condition (node shutdown, a node gone
(PodGC), preemption, eviction) makes the job PREEMPTED on every Kubernetes backend, from the shared pod
watch; the task then resubmits it, resuming from its checkpoint. The test plays the controllers and the
kubelet/PodGC on the real kube-apiserver."""

from __future__ import annotations

import asyncio
import datetime
import threading

import pytest
from kube_cluster import resource_path

from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.preemption import RESUME_ENV
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState, JobStatus
from airflow_ml_provider.labels import JOB_NAME as JOB_NAME_LABEL
from support import wait_for

pytestmark = pytest.mark.integration

SHUTDOWN = ("TerminationByKubelet", "Pod was terminated in response to imminent node shutdown.")
NODE_GONE = ("DeletionByPodGC", "PodGC: node no longer exists")
CHECKPOINT = '{"event": "checkpoint", "epoch": 2, "step": 44, "path": "/ckpt/ckpt-000002.npz"}'


def _pod(namespace: str, name: str, job: dict, owner_uid: str | None = None, node: str = "fake-node") -> dict:
    """A pod as the job's controller makes it: the job's labels, owned by the job."""
    meta = job["metadata"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": namespace, "labels": meta["labels"], "ownerReferences": [{
            "apiVersion": job["apiVersion"], "kind": job["kind"], "name": meta["name"],
            "uid": owner_uid or meta["uid"], "controller": True}]},
        "spec": {"nodeName": node, "containers": [{"name": "worker", "image": "img:1"}]}}


def _disrupt(cluster, namespace: str, pod: str, reason: tuple[str, str]) -> None:
    cluster.patch_status(f"/api/v1/namespaces/{namespace}/pods/{pod}", {"conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": reason[0], "message": reason[1],
         "lastTransitionTime": "2026-11-26T00:00:00Z"}]})


@pytest.mark.parametrize("kind,framework,reason", [("mpijob", "horovod", SHUTDOWN), ("volcano", "horovod", NODE_GONE),
                                                   ("volcano", "lightgbm", SHUTDOWN),
                                                   ("indexed-job", "lightgbm", NODE_GONE)])
def test_a_disrupted_worker_pod_makes_the_job_preempted(kind, framework, reason, kube_cluster, kubelet, namespace):
    backend = TrainingBackendHook().get_backend(kind)  # as a follower builds it: from the connection
    name = JobIdentity("spot", f"train-{framework}", "manual__1").name
    backend.submit(name, TrainingJobSpec(framework=framework, command=["python", "t.py"], num_workers=2,
                                         image="img:1"), {})
    job = backend.get(backend.kind, name)
    pods = f"/api/v1/namespaces/{namespace}/pods"

    def play() -> None:
        # a disrupted pod of an earlier job of that name (another uid) is not this job's
        kube_cluster.request("POST", pods, _pod(namespace, f"{name}-old", job, owner_uid="0f0f0f0f-old"))
        _disrupt(kube_cluster, namespace, f"{name}-old", reason)
        kube_cluster.request("POST", pods, _pod(namespace, f"{name}-worker-1", job))
        kube_cluster.request("POST", pods, _pod(namespace, f"{name}-worker-0", job))
        _disrupt(kube_cluster, namespace, f"{name}-worker-0", reason)

    async def follow() -> list[JobStatus]:
        seen = []
        async for status in backend.statuses(name, interval=0.5):
            seen.append(status)
            if len(seen) == 1:
                await asyncio.to_thread(play)
            if status.state.is_terminal:
                return seen

    seen = asyncio.run(asyncio.wait_for(follow(), 120))
    assert seen[-1] == JobStatus(JobState.PREEMPTED, f"pod {name}-worker-0 is disrupted ({reason[0]}: {reason[1]})")
    assert {status.state for status in seen[:-1]} == {JobState.PENDING}


def _mpijobs(cluster, namespace: str) -> list[dict]:
    return cluster.request("GET", resource_path("kubeflow.org/v2beta1", "MPIJob", namespace))["items"]


def _play_spot_loss(cluster, kubelet, namespace: str, seen: list[dict]) -> None:
    """The first MPIJob runs and checkpoints, then its worker's spot node shuts down; the resubmitted job
    (a new object) succeeds."""
    listing = resource_path("kubeflow.org/v2beta1", "MPIJob", namespace)
    first = wait_for(lambda: next(iter(_mpijobs(cluster, namespace)), None), what="the MPIJob")
    seen.append(first)
    name = first["metadata"]["name"]
    pods = f"/api/v1/namespaces/{namespace}/pods"
    cluster.request("POST", pods, _pod(namespace, f"{name}-launcher", first))
    cluster.request("POST", pods, _pod(namespace, f"{name}-worker-0", first))
    kubelet.append(namespace, f"{name}-launcher", "worker", CHECKPOINT)
    cluster.patch_status(f"{listing}/{name}", {"conditions": [
        {"type": "Running", "status": "True", "lastTransitionTime": "2026-11-26T00:00:00Z"}]})
    _disrupt(cluster, namespace, f"{name}-worker-0", SHUTDOWN)
    uid = first["metadata"]["uid"]
    again = wait_for(lambda: next((job for job in _mpijobs(cluster, namespace) if job["metadata"]["uid"] != uid), None),
                     timeout=120, what="a resubmission")
    seen.append(again)
    kubelet.append(namespace, f"{name}-launcher", "worker", '{"event": "result", "accuracy": 0.95}')
    cluster.patch_status(f"{listing}/{name}", {"conditions": [
        {"type": "Succeeded", "status": "True", "lastTransitionTime": "2026-11-26T00:02:00Z"}]})


def test_a_job_whose_spot_node_shuts_down_is_resubmitted_from_its_checkpoint(kube_cluster, kubelet, namespace,
                                                                             run_dag, capfd):
    seen: list[dict] = []
    player = threading.Thread(target=_play_spot_loss, args=(kube_cluster, kubelet, namespace, seen), daemon=True)
    player.start()
    result = run_dag("ml_test_mpijob_evicted")  # tests/dags/ml_elastic_test_dags.py: deferrable, checkpoint_dir /ckpt
    player.join(30)
    assert result.state == "success", result.task_states
    first, second = seen
    launcher = second["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert {item["name"]: item.get("value") for item in launcher["env"]}[RESUME_ENV] == "/ckpt/ckpt-000002.npz"
    out = capfd.readouterr().out
    assert f"pod {first['metadata']['name']}-worker-0 is disrupted ({SHUTDOWN[0]}: {SHUTDOWN[1]})" in out
    assert "resuming from checkpoint /ckpt/ckpt-000002.npz at step 44, epoch 2" in out
    assert JOB_NAME_LABEL in second["metadata"]["labels"]


def _taint(cluster, node: str, key: str, age_s: float) -> None:
    """Play the node lifecycle controller: a NoExecute taint on ``node``, added ``age_s`` ago."""
    added = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=age_s)
    cluster.request("PATCH", f"/api/v1/nodes/{node}", {"spec": {"taints": [
        {"key": key, "effect": "NoExecute", "timeAdded": added.strftime("%Y-%m-%dT%H:%M:%SZ")}]}},
        "application/merge-patch+json")


@pytest.mark.parametrize("kind,framework", [("mpijob", "horovod"), ("indexed-job", "lightgbm")])
def test_a_worker_on_a_dead_node_is_lost_when_kubernetes_would_evict_it(kind, framework, kube_cluster, kubelet,
                                                                         namespace):
    """A sync status (one pod list, a GET per node; what sensors and search trials read): a pod on a node
    tainted unreachable is not lost while it tolerates the taint (300 s by default), lost once it no longer
    does, and lost at once on a node out of service or deleted, with nothing marking the pod (no PodGC)."""
    backend = TrainingBackendHook().get_backend(kind)
    name = JobIdentity("spot", f"dead-{framework}", "manual__1").name
    backend.submit(name, TrainingJobSpec(framework=framework, command=["python", "t.py"], num_workers=2,
                                         image="img:1"), {})
    job = backend.get(backend.kind, name)
    node = kubelet.register_node(kube_cluster, f"dead-{namespace}")
    kube_cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods",
                         _pod(namespace, f"{name}-worker-0", job, node=node))

    def both() -> list[JobStatus]:
        return [backend.status(name)]

    assert {status.state for status in both()} == {JobState.PENDING}
    _taint(kube_cluster, node, "node.kubernetes.io/unreachable", 60)  # within the pod's 300 s: may come back
    assert {status.state for status in both()} == {JobState.PENDING}
    _taint(kube_cluster, node, "node.kubernetes.io/unreachable", 600)
    lost = JobStatus(JobState.PREEMPTED, f"pod {name}-worker-0 lost its node {node} (unreachable for 600 s)")
    assert [(s.state, s.message[:-7]) for s in both()] == [(lost.state, lost.message[:-7])]
    _taint(kube_cluster, node, "node.kubernetes.io/out-of-service", 0)
    assert both() == [JobStatus(JobState.PREEMPTED, f"pod {name}-worker-0 lost its node {node} (out of service)")]
    kube_cluster.request("DELETE", f"/api/v1/nodes/{node}")
    gone = JobStatus(JobState.PREEMPTED, f"pod {name}-worker-0 lost its node {node} (the Node was deleted)")
    assert both() == [gone]
