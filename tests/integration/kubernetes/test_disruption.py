"""Spot and disruption: a pod of the job with a DisruptionTarget condition (node shutdown, a node gone
(PodGC), preemption, eviction) makes the job PREEMPTED on every Kubernetes backend, from the shared pod
watch; the task then resubmits it, resuming from its checkpoint. The test plays the controllers and the
kubelet/PodGC on the real kube-apiserver."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import threading
import uuid
from urllib.parse import parse_qs, urlparse

import pytest
import yaml
from kube_cluster import TRAINER_TOKEN, new_namespace, resource_path

from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.jobs import drivers
from airflow_ml_provider.jobs.backends.kubernetes import job_pods
from airflow_ml_provider.jobs.backends.kubernetes.watch import CollectionWatcher
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.preemption import RESUME_ENV
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState, JobStatus
from airflow_ml_provider.labels import JOB_NAME as JOB_NAME_LABEL
from airflow_ml_provider.labels import PREEMPTIONS as PREEMPTIONS_LABEL
from support import REPO, wait_for

pytestmark = pytest.mark.integration

SHUTDOWN = ("TerminationByKubelet", "Pod was terminated in response to imminent node shutdown.")
NODE_GONE = ("DeletionByPodGC", "PodGC: node no longer exists")
RBAC = REPO / "deploy" / "kubernetes" / "rbac.yaml"
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
                                                   ("indexed-job", "lightgbm", NODE_GONE),
                                                   ("trainjob", "pytorch", SHUTDOWN)])
def test_a_disrupted_worker_pod_makes_the_job_preempted(kind, framework, reason, kube_cluster, kubelet, namespace,
                                                        request):
    """From the shared pod watch (a deferred task) and from a polled status (sensors, search trials) alike."""
    if kind == "trainjob":
        request.getfixturevalue("trainer_cluster")  # Trainer's and JobSet's CRDs
    backend = TrainingBackendHook().get_backend(kind)  # as a follower builds it: from the connection
    name = JobIdentity("spot", f"train-{framework}", "manual__1").name
    # the job's first resubmission; the pods of the attempt before it may still be there
    backend.submit(name, TrainingJobSpec(framework=framework, command=["python", "t.py"], num_workers=2,
                                         image="img:1"), {PREEMPTIONS_LABEL: "1"})
    job = backend.get(backend.kind, name)
    pods = f"/api/v1/namespaces/{namespace}/pods"

    def play() -> None:
        # a disrupted pod of the earlier job of that name (another uid, or for a TrainJob's pods, made through
        # a JobSet, the earlier attempt's labels) is not this job's
        old = _worker(namespace, f"{name}-old", job)
        del old["metadata"]["labels"][PREEMPTIONS_LABEL]
        if kind != "trainjob":
            old["metadata"]["ownerReferences"][0]["uid"] = "0f0f0f0f-old"
        kube_cluster.request("POST", pods, old)
        _disrupt(kube_cluster, namespace, f"{name}-old", reason)
        kube_cluster.request("POST", pods, _worker(namespace, f"{name}-worker-1", job))
        kube_cluster.request("POST", pods, _worker(namespace, f"{name}-worker-0", job))
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
    preempted = JobStatus(JobState.PREEMPTED, f"pod {name}-worker-0 is disrupted ({reason[0]}: {reason[1]})")
    assert seen[-1] == preempted
    assert {status.state for status in seen[:-1]} == {JobState.PENDING}
    assert backend.status(name) == preempted


T0, T1 = "2026-11-26T00:00:00Z", "2026-11-26T00:02:00Z"
# What each backend's controller writes while the job runs, and once it has succeeded (tests/integration/
# kubernetes/test_states.py and test_trainjob.py map every state).
PROGRESS = {
    "mpijob": ({"conditions": [{"type": "Running", "status": "True", "lastTransitionTime": T0}]},
               {"conditions": [{"type": "Succeeded", "status": "True", "lastTransitionTime": T1}]}),
    "volcano": ({"state": {"phase": "Running"}}, {"state": {"phase": "Completed"}}),
    "indexed-job": ({"active": 2}, {"conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": T1}],
                                    "succeeded": 2}),
    "trainjob": ({"jobsStatus": [{"name": "node", "ready": 2, "succeeded": 0, "failed": 0, "active": 2,
                                  "suspended": 0}]},
                 {"conditions": [{"type": "Complete", "status": "True", "reason": "AllJobsCompleted",
                                  "message": "jobs completed", "lastTransitionTime": T1}],
                  "jobsStatus": [{"name": "node", "ready": 0, "succeeded": 2, "failed": 0, "active": 0,
                                  "suspended": 0}]}),
}


def _template_labels(job: dict) -> dict[str, str]:
    """The labels the job's pod template gives its pods (the first template that carries the job's name)."""
    pending = [job["spec"]]
    while pending:
        node = pending.pop(0)
        if isinstance(node, dict):
            labels = (node.get("metadata") or {}).get("labels") or {}
            if JOB_NAME_LABEL in labels and "spec" in node:
                return labels
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    raise AssertionError(f"no pod template with {JOB_NAME_LABEL} in {job['kind']}")


def _worker(namespace: str, name: str, job: dict) -> dict:
    """A worker pod as the backend's controllers make it: its template's labels, owned by the job, or for a
    TrainJob by the batch Job that JobSet makes (``<job>-node-0``), with the job's labels only to tie it."""
    pod = _pod(namespace, name, job)
    pod["metadata"]["labels"] = dict(_template_labels(job))
    if job["kind"] == "TrainJob":
        pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "controller": True,
                                               "name": f"{job['metadata']['name']}-node-0", "uid": str(uuid.uuid4())}]
    return pod


def _play_spot_loss(cluster, kubelet, namespace: str, backend, seen: list[dict]) -> None:
    """The first job runs and checkpoints, then its worker's spot node shuts down; the resubmitted job (a new
    object) runs beside the first one's disrupted pod, which the garbage collector has not removed yet,
    and succeeds."""
    listing = resource_path(backend.api_version, backend.kind, namespace)
    running, succeeded = PROGRESS[backend.name]

    def jobs() -> list[dict]:  # a list's items of a built-in kind (batch/v1 Job) name neither apiVersion nor kind
        return [{**job, "apiVersion": backend.api_version, "kind": backend.kind}
                for job in cluster.request("GET", listing)["items"]]

    first = wait_for(lambda: next(iter(jobs()), None), what=f"the {backend.kind}")
    seen.append(first)
    name = first["metadata"]["name"]
    pods = f"/api/v1/namespaces/{namespace}/pods"
    cluster.request("POST", pods, _worker(namespace, f"{name}-worker-0", first))
    kubelet.append(namespace, f"{name}-worker-0", "worker", CHECKPOINT)
    cluster.patch_status(f"{listing}/{name}", running)
    _disrupt(cluster, namespace, f"{name}-worker-0", SHUTDOWN)
    uid = first["metadata"]["uid"]
    again = wait_for(lambda: next((job for job in jobs() if job["metadata"]["uid"] != uid), None), timeout=120,
                     what="a resubmission")
    seen.append(again)
    cluster.request("POST", pods, _worker(namespace, f"{name}-worker-0-again", again))
    kubelet.append(namespace, f"{name}-worker-0-again", "worker", '{"event": "result", "accuracy": 0.95}')
    cluster.patch_status(f"{listing}/{name}", running)
    cluster.patch_status(f"{listing}/{name}", succeeded)


def _env_lists(obj) -> list[list[dict]]:
    """Every container environment in the object (a TrainJob's is its trainer's)."""
    if isinstance(obj, list):
        return [env for item in obj for env in _env_lists(item)]
    if not isinstance(obj, dict):
        return []
    own = [obj["env"]] if isinstance(obj.get("env"), list) else []
    return own + [env for value in obj.values() for env in _env_lists(value)]


def _resume_points(obj: dict) -> list[str | None]:
    """What each container environment of the object says AIRFLOW_ML_RESUME_FROM is (None: nothing)."""
    return [next((var.get("value") for var in env if var["name"] == RESUME_ENV), None) for env in _env_lists(obj)]


@pytest.mark.parametrize("kind", ["mpijob", "volcano", "indexed-job", "trainjob"])
def test_a_job_whose_spot_node_shuts_down_is_resubmitted_from_its_checkpoint(kind, kube_cluster, kubelet, namespace,
                                                                             run_dag, capfd, request):
    if kind == "trainjob":
        request.getfixturevalue("trainer_cluster")  # Trainer's and JobSet's CRDs
    backend = TrainingBackendHook().get_backend(kind)
    seen: list[dict] = []
    player = threading.Thread(target=_play_spot_loss, args=(kube_cluster, kubelet, namespace, backend, seen),
                              daemon=True)
    player.start()
    # tests/dags/ml_elastic_test_dags.py: deferrable, checkpoint_dir /ckpt; horovod on mpijob, pytorch elsewhere
    result = run_dag(f"ml_test_spot_{kind.replace('-', '_')}")
    player.join(30)
    assert result.state == "success", result.task_states
    first, second = seen
    assert set(_resume_points(first)) == {None}
    assert set(_resume_points(second)) == {"/ckpt/ckpt-000002.npz"}, "every container resumes"
    out = capfd.readouterr().out
    assert f"pod {first['metadata']['name']}-worker-0 is disrupted ({SHUTDOWN[0]}: {SHUTDOWN[1]})" in out
    assert "resuming from checkpoint /ckpt/ckpt-000002.npz at step 44, epoch 2" in out
    # one preemption: the first job's disrupted pod, still there, is not taken for the second job's
    (left,) = kube_cluster.request("GET", resource_path(backend.api_version, backend.kind, namespace))["items"]
    assert left["metadata"]["uid"] == second["metadata"]["uid"]
    assert left["metadata"]["labels"][PREEMPTIONS_LABEL] == "1"


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


# Node loss through the shared watches (a deferred or sync follower): the Nodes the job's pods are bound to
# come from one Node watch per connection, as the user holding exactly deploy/kubernetes/rbac.yaml's rules.

def _shipped(kind: str) -> dict:
    [doc] = [doc for doc in yaml.safe_load_all(RBAC.read_text()) if doc["kind"] == kind]
    return doc


@pytest.fixture
def trainer(kube_cluster, kubelet, monkeypatch) -> str:
    """A namespace whose connection authenticates as "trainer", holding the shipped Role there and nothing
    else; a fresh start for what the follower remembers of refused Node watches."""
    monkeypatch.setattr(job_pods, "_no_node_info", {})
    monkeypatch.setattr(job_pods, "_warned", set())
    namespace = new_namespace(kube_cluster, monkeypatch, kube_cluster.kubeconfig_for(TRAINER_TOKEN))
    kube_cluster.grant(namespace, "trainer", _shipped("Role")["rules"])
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT", json.dumps({"conn_type": "ml_training", "extra": {
        "namespace": namespace, "image": "registry.example/train:1"}}))
    return namespace


@pytest.fixture
def nodes_role(kube_cluster):
    """The shipped optional ClusterRole (read Nodes), held by "trainer" for the test."""
    revoke = kube_cluster.grant_cluster("trainer", _shipped("ClusterRole")["rules"])
    yield
    revoke()


@pytest.fixture
def shown(monkeypatch) -> list[str]:
    """The log lines the task's follower shows, as it shows them (the player waits on them)."""
    seen: list[str] = []
    report = drivers._report

    def recording(step, *args):
        seen.extend(line.text for line in step.lines)
        return report(step, *args)

    monkeypatch.setattr(drivers, "_report", recording)
    return seen


def _play_node_loss(cluster, kubelet, namespace: str, backend, shown: list[str], seen: list[dict]) -> None:
    """The first MPIJob's worker runs on a spot node and checkpoints; once the task has shown that, the
    node's Node object is deleted (nothing marks the pod). The resubmitted job runs on another node."""
    listing = resource_path(backend.api_version, backend.kind, namespace)
    running, succeeded = PROGRESS[backend.name]
    first = wait_for(lambda: next(iter(cluster.request("GET", listing)["items"]), None), what="the MPIJob")
    seen.append(first)
    name, spot = first["metadata"]["name"], kubelet.register_node(cluster, f"spot-{namespace}")
    pods = f"/api/v1/namespaces/{namespace}/pods"
    worker = _worker(namespace, f"{name}-worker-0", first)
    worker["spec"]["nodeName"] = spot
    cluster.request("POST", pods, worker)
    kubelet.append(namespace, f"{name}-worker-0", "worker", CHECKPOINT)
    cluster.patch_status(f"{listing}/{name}", running)
    wait_for(lambda: CHECKPOINT in shown, what="the task to show the checkpoint line")
    cluster.request("DELETE", f"/api/v1/nodes/{spot}")
    uid = first["metadata"]["uid"]
    again = wait_for(lambda: next((job for job in cluster.request("GET", listing)["items"]
                                   if job["metadata"]["uid"] != uid), None), what="a resubmission")
    seen.append(again)
    cluster.request("POST", pods, _worker(namespace, f"{name}-worker-0-again", again))  # on fake-node
    kubelet.append(namespace, f"{name}-worker-0-again", "worker", '{"event": "result", "accuracy": 0.95}')
    cluster.patch_status(f"{listing}/{name}", running)
    cluster.patch_status(f"{listing}/{name}", succeeded)


def test_a_deferred_task_whose_worker_s_node_is_deleted_resumes_from_its_checkpoint(
        kube_cluster, kubelet, trainer, nodes_role, run_dag, shown, capfd):
    backend = TrainingBackendHook().get_backend("mpijob")
    seen: list[dict] = []
    player = threading.Thread(target=_play_node_loss, args=(kube_cluster, kubelet, trainer, backend, shown, seen),
                              daemon=True)
    player.start()
    result = run_dag("ml_test_spot_mpijob")  # deferrable: followed by the triggerer through the shared watches
    player.join(30)
    assert result.state == "success", result.task_states
    first, second = seen
    assert set(_resume_points(second)) == {"/ckpt/ckpt-000002.npz"}, "every container resumes"
    out = capfd.readouterr().out
    name = first["metadata"]["name"]
    assert f"pod {name}-worker-0 lost its node spot-{trainer} (the Node was deleted)" in out
    assert "resuming from checkpoint /ckpt/ckpt-000002.npz at step 44, epoch 2" in out
    (left,) = kube_cluster.request("GET", resource_path(backend.api_version, backend.kind, trainer))["items"]
    assert left["metadata"]["uid"] == second["metadata"]["uid"]
    # Nodes are followed through the shared Node watch of each deferral (a list, then a watch) and never
    # polled; the only reads by name are the resubmission's check that the job it replaces has ended (submit,
    # on 409), which is no follow and which a loaded machine may repeat (CI at load 8-14 read the old pods'
    # node twice more)
    nodes = [(event["verb"], event["objectRef"].get("name")) for event in kube_cluster.audited(None)
             if event.get("objectRef", {}).get("resource") == "nodes" and event["user"]["username"] == "trainer"]
    assert nodes.count(("list", None)) == 2 and nodes.count(("watch", None)) == 2, nodes
    gets = [name for verb, name in nodes if verb == "get"]
    assert f"spot-{trainer}" in gets and len(gets) <= 4 and len(nodes) == 4 + len(gets), nodes
    pods = [(event["verb"], parse_qs(urlparse(event["requestURI"]).query).get("labelSelector", [""])[0])
            for event in kube_cluster.audited(trainer) if event["verb"] in ("get", "list", "watch")
            and event["objectRef"]["resource"] == "pods" and not event["objectRef"].get("subresource")]
    shared = JOB_NAME_LABEL  # selects every job's pods: the shared pod watch of each deferral
    assert sorted(read for read in pods if read[1] == shared) == [("list", shared)] * 2 + [("watch", shared)] * 2
    # besides: lists of the job's own pods (its selector), the pod log reader's, and the resubmission check's
    assert {read for read in pods if read[1] != shared} == {("list", f"{JOB_NAME_LABEL}={name}")}, pods


async def _follow(backend, names: list[str], play) -> list[list[JobStatus]]:
    """Each job's statuses (repeats left out) through ``backend.statuses``, all in one event loop, until it is
    PREEMPTED or has ended; ``play`` runs (in a thread) once every follower has its first status."""
    started = asyncio.Event()
    firsts: set[str] = set()

    async def follow(name: str) -> list[JobStatus]:
        seen: list[JobStatus] = []
        async for status in backend.statuses(name, interval=0.5):
            if not seen or seen[-1] != status:
                seen.append(status)
            firsts.add(name)
            if len(firsts) == len(names):
                started.set()
            if status.state.is_terminal:
                return seen

    followers = [asyncio.create_task(follow(name)) for name in names]
    await asyncio.wait_for(started.wait(), 60)
    await asyncio.to_thread(play)
    return await asyncio.wait_for(asyncio.gather(*followers), 60)


def _job_on(cluster, kubelet, backend, namespace: str, job: str, node: str) -> None:
    """Submit ``job``, and play its controller and the scheduler: its worker pod bound to a new Node ``node``."""
    backend.submit(job, TrainingJobSpec(framework="horovod", command=["python", "t.py"], num_workers=2,
                                        image="img:1"), {})
    kubelet.register_node(cluster, node)
    worker = _worker(namespace, f"{job}-worker-0", backend.get(backend.kind, job))
    worker["spec"]["nodeName"] = node
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", worker)


def test_followers_see_lost_nodes_through_one_shared_node_watch(kube_cluster, kubelet, trainer, nodes_role):
    """Two jobs followed at once, each with a worker on its own node: the one whose Node is deleted and the
    one whose node is marked out of service read PREEMPTED from one list+watch of Nodes, with no per-job read."""
    CollectionWatcher._shared.clear()
    backend = TrainingBackendHook().get_backend("mpijob")
    jobs = {JobIdentity("spot", f"node-{i}", "manual__1").name: f"n{i}-{trainer}" for i in range(2)}
    for job, node in jobs.items():
        _job_on(kube_cluster, kubelet, backend, trainer, job, node)
    (gone, gone_node), (stopped, stopped_node) = jobs.items()
    sync_calls, real = [], backend.api.call_api
    backend.api.call_api = lambda *args, **kwargs: sync_calls.append(args[0]) or real(*args, **kwargs)

    def play() -> None:
        kube_cluster.request("DELETE", f"/api/v1/nodes/{gone_node}")
        _taint(kube_cluster, stopped_node, "node.kubernetes.io/out-of-service", 0)

    seen = asyncio.run(_follow(backend, list(jobs), play))
    assert [statuses[-1] for statuses in seen] == [
        JobStatus(JobState.PREEMPTED, f"pod {gone}-worker-0 lost its node {gone_node} (the Node was deleted)"),
        JobStatus(JobState.PREEMPTED, f"pod {stopped}-worker-0 lost its node {stopped_node} (out of service)")]
    assert {status.state for statuses in seen for status in statuses[:-1]} == {JobState.PENDING}
    [nodes] = [watcher for watcher in CollectionWatcher._shared.values() if watcher.path == "/api/v1/nodes"]
    assert nodes.requests == 2, "one list and one watch of Nodes"
    assert sync_calls == [], "no per-job read"


def test_without_the_nodes_role_a_lost_node_is_one_warning_and_the_job_is_followed_as_before(
        kube_cluster, kubelet, trainer, caplog):
    backend = TrainingBackendHook().get_backend("mpijob")
    job, node = JobIdentity("spot", "no-nodes", "manual__1").name, f"n-{trainer}"
    _job_on(kube_cluster, kubelet, backend, trainer, job, node)
    path = resource_path(backend.api_version, backend.kind, trainer, job)
    running, succeeded = PROGRESS["mpijob"]

    def warned() -> list[str]:
        return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]

    def play() -> None:
        kube_cluster.request("DELETE", f"/api/v1/nodes/{node}")
        wait_for(lambda: any("nodes cannot be read" in message for message in warned()), 60,
                 "the warning that Nodes cannot be read")
        kube_cluster.patch_status(path, running)
        kube_cluster.patch_status(path, succeeded)

    with caplog.at_level(logging.WARNING):
        [seen] = asyncio.run(_follow(backend, [job], play))
    assert [status.state for status in seen] == [JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED]
    [warning] = warned()
    assert warning.startswith("nodes cannot be read, so a disrupted (spot, evicted) pod or one whose node is gone "
                              "is not reported as PREEMPTED (list/watch /api/v1/nodes: 403 ")
