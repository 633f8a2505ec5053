"""Kueue admission on the real kube-apiserver with Kueue's own Workload CRD; the test plays Kueue's
controller (it creates the job's Workload and writes its conditions, suspends and unsuspends the job)
and the MPI operator's (it writes the MPIJob's conditions), as Kueue and the operator would."""

from __future__ import annotations

import asyncio
import json
import threading
from urllib.parse import parse_qs, urlparse

import pytest
import yaml
from kube_cluster import CRDS_DIR, TRAINER_TOKEN, _install_crds, new_namespace, resource_path

from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.jobs import drivers
from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.base import BackendAccessError, JobNotFound, JobSubmissionError
from airflow_ml_provider.jobs.backends.kubernetes import schemas
from airflow_ml_provider.jobs.backends.kubernetes.kueue import PRIORITY_LABEL, QUEUE_LABEL, WORKLOAD_API
from airflow_ml_provider.jobs.backends.kubernetes.watch import CollectionWatcher
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.preemption import RESUME_ENV
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import REQUEUED, JobState, JobStatus
from airflow_ml_provider.labels import PREEMPTIONS as PREEMPTIONS_LABEL
from support import REPO, wait_for

pytestmark = pytest.mark.integration

RBAC = REPO / "deploy" / "kubernetes" / "rbac.yaml"

MPIJOB = ("kubeflow.org/v2beta1", "MPIJob")
NO_QUOTA = ("couldn't assign flavors to pod set worker: insufficient quota for nvidia.com/gpu in flavor spot, "
            "request > maximum capacity (16 > 8)")
LESS_QUOTA = "couldn't assign flavors to pod set worker: insufficient quota for nvidia.com/gpu in flavor spot, 8 more needed"
PREEMPTED = "Preempted to accommodate a workload (UID: 1234) due to prioritization in the ClusterQueue"
CHECKPOINT = '{"event": "checkpoint", "epoch": 2, "step": 44, "path": "/ckpt/ckpt-000002.npz"}'
SPEC = TrainingJobSpec(framework="horovod", command=["python", "-m", "train"], num_workers=2, image="img:1",
                       scheduling={"queue": "team-a", "priority_class": "high-priority"})


@pytest.fixture(scope="session")
def kueue_cluster(kube_cluster):
    """The session's cluster with Kueue's Workload CRD (requirements/crds.lock, next/) installed."""
    crd = CRDS_DIR / "next" / "kueue.x-k8s.io_workloads.yaml"
    if not crd.is_file():
        pytest.skip(f"no verified Kueue CRD {crd}: run `make crds`")
    _install_crds(kube_cluster, [crd])
    return kube_cluster


@pytest.fixture
def kueue(kueue_cluster, namespace, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT",
                       json.dumps({"conn_type": "ml_training", "extra": {"queueing": "kueue"}}))
    return kueue_cluster


def _condition(kind: str, status: bool, reason: str, message: str, at: str) -> dict:
    return {"type": kind, "status": "True" if status else "False", "reason": reason, "message": message,
            "lastTransitionTime": f"2026-11-26T00:00:{at}Z"}


class KueueDouble:
    """What Kueue's controller does for one MPIJob in ``namespace`` (the first, or the one after ``skip``
    others in name order), step by step."""

    def __init__(self, cluster, namespace: str, skip: int = 0):
        self.cluster, self.namespace = cluster, namespace
        self.jobs = resource_path(*MPIJOB, namespace)
        self.job = wait_for(lambda: next(iter(cluster.request("GET", self.jobs)["items"][skip:]), None),
                            what="the MPIJob")
        self.name = self.job["metadata"]["name"]
        self.workload = f"mpijob-{self.name}-5b2e1"[:63]  # Kueue: <kind>-<job>-<hash>, owned by the job
        path = f"/apis/{WORKLOAD_API}/namespaces/{namespace}/workloads"
        workload = {
            "apiVersion": WORKLOAD_API, "kind": "Workload",
            "metadata": {"name": self.workload, "namespace": namespace, "ownerReferences": [{
                "apiVersion": MPIJOB[0], "kind": MPIJOB[1], "name": self.name, "uid": self.job["metadata"]["uid"],
                "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"queueName": "team-a", "priorityClassName": "high-priority", "podSets": [{
                "name": "worker", "count": 2,
                "template": {"spec": {"containers": [{"name": "worker", "image": "img:1"}]}}}]}}
        # what Kueue would create: valid for Kueue v0.19.2's CRD, no field the 1.20 server here would prune unseen
        assert schemas.validate(workload) == []
        cluster.request("POST", path, workload)
        self.workload_path = f"{path}/{self.workload}"

    def conditions(self, *conditions: dict) -> None:
        self.cluster.patch_status(self.workload_path, {"conditions": list(conditions)})

    def suspend(self, suspended: bool) -> None:
        self.cluster.request("PATCH", f"{self.jobs}/{self.name}", {"spec": {"runPolicy": {"suspend": suspended}}},
                             "application/merge-patch+json")

    def job_conditions(self, *conditions: dict) -> None:
        self.cluster.patch_status(f"{self.jobs}/{self.name}", {"conditions": list(conditions)})


@pytest.fixture
def events(monkeypatch):
    """The state lines the task's follower logs, as they are logged (the player waits on them; what the
    test asserts is read from the task's own output)."""
    seen: list[str] = []
    report = drivers._report

    def recording(step, *args):
        seen.extend(step.events)
        return report(step, *args)

    monkeypatch.setattr(drivers, "_report", recording)
    return seen


def _play_kueue(cluster, kubelet, namespace: str, events: list[str], seen: dict) -> None:
    def logged(text: str, times: int = 1) -> None:
        wait_for(lambda: sum(text in event for event in events) >= times, what=f"the task to log {text!r}")

    kueue = KueueDouble(cluster, namespace)
    seen["first"] = kueue.job
    kueue.conditions(_condition("QuotaReserved", False, "Pending", NO_QUOTA, "01"))
    logged(NO_QUOTA)
    kueue.conditions(_condition("QuotaReserved", False, "Pending", LESS_QUOTA, "02"))
    logged(LESS_QUOTA)
    admitted = [_condition("QuotaReserved", True, "QuotaReserved", "Quota reserved in ClusterQueue gpu", "03"),
                _condition("Admitted", True, "Admitted", "The workload is admitted", "03")]
    kueue.conditions(*admitted)
    kueue.suspend(False)
    logged("Job is PENDING: admitted by Kueue")
    launcher = f"{kueue.name}-launcher"
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": launcher, "namespace": namespace, "labels": kueue.job["metadata"]["labels"]},
        "spec": {"nodeName": "fake-node", "containers": [{"name": "worker", "image": "img:1"}]}})
    kubelet.append(namespace, launcher, "worker", CHECKPOINT)
    kueue.job_conditions(_condition("Running", True, "MPIJobRunning", "launcher running", "04"))
    logged("Job is RUNNING")
    # Kueue preempts the workload for a higher-priority one: Evicted, quota released, the job suspended
    kueue.conditions(_condition("Evicted", True, "Preempted", PREEMPTED, "05"),
                     _condition("QuotaReserved", False, "Pending", LESS_QUOTA, "05"),
                     _condition("Admitted", False, "NoReservation", "The workload has no reservation", "05"))
    kueue.suspend(True)
    kueue.job_conditions(_condition("Running", False, "MPIJobSuspended", "suspended", "05"),
                         _condition("Suspended", True, "MPIJobSuspended", "MPIJob suspended", "05"))
    logged("Job is PREEMPTED")
    # requeued and admitted again by Kueue (which clears Evicted); the same MPIJob is unsuspended
    kueue.conditions(_condition("Evicted", False, "QuotaReserved", "Previously: Preempted", "06"), *admitted)
    kueue.suspend(False)
    logged("Job is PENDING: admitted by Kueue", times=2)
    kueue.job_conditions(_condition("Suspended", False, "MPIJobResumed", "resumed", "07"),
                         _condition("Running", True, "MPIJobRunning", "launcher running", "07"))
    logged("Job is RUNNING", times=2)
    kubelet.append(namespace, launcher, "worker", '{"event": "result", "accuracy": 0.95}')
    kueue.job_conditions(_condition("Succeeded", True, "MPIJobSucceeded", "done", "08"))


@pytest.mark.parametrize("dag_id", ["ml_test_kueue_sync", "ml_test_kueue_deferred"])
def test_a_job_kueue_queues_admits_evicts_and_admits_again_is_followed_to_success(
        kueue, kubelet, namespace, run_dag, events, capfd, dag_id):
    seen: dict = {}
    player = threading.Thread(target=_play_kueue, args=(kueue, kubelet, namespace, events, seen), daemon=True)
    player.start()
    result = run_dag(dag_id)
    player.join(30)
    assert result.state == "success", result.task_states
    out = capfd.readouterr().out
    first = seen["first"]
    assert first["metadata"]["labels"][QUEUE_LABEL] == "team-a"
    assert first["metadata"]["labels"][PRIORITY_LABEL] == "high-priority"
    assert first["spec"]["runPolicy"]["suspend"] is True  # created suspended: Kueue admits it
    assert "priorityClass" not in first["spec"]["runPolicy"]["schedulingPolicy"]  # not a pod PriorityClass
    [job] = kueue.request("GET", resource_path(*MPIJOB, namespace))["items"]
    assert job["metadata"]["uid"] == first["metadata"]["uid"], "one job object throughout"
    assert PREEMPTIONS_LABEL not in job["metadata"]["labels"]
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert RESUME_ENV not in {item["name"] for item in launcher["env"]}  # never resubmitted
    # each transition once, in order, with Kueue's reasons
    expected = [f"Job is QUEUED: Pending: {NO_QUOTA}", f"Job is QUEUED: Pending: {LESS_QUOTA}",
                "Job is PENDING: admitted by Kueue; waiting for its pods", "Job is RUNNING",
                f"Job is PREEMPTED: evicted by Kueue (Preempted: {PREEMPTED}); requeued, waiting: Pending: {LESS_QUOTA}",
                "Job is PENDING: admitted by Kueue; waiting for its pods", "Job is RUNNING", "Job is SUCCEEDED"]
    # before the double's first condition the follower may see the moments before Kueue's verdict, or not:
    # the Workload not created yet, or created and not yet considered (as with a real Kueue, by timing)
    before_verdict = ("Job is QUEUED: waiting for Kueue", "Job is QUEUED: waiting for admission by Kueue")
    shown = [event for event in events if not event.startswith(before_verdict)]
    assert [e.split(": MPIJob")[0] for e in shown] == [e.split(": MPIJob")[0] for e in expected], shown
    for line in set(expected):
        assert out.count(line) == expected.count(line), (line, out.count(line))
    assert "resubmitting" not in out.lower()
    # no read beyond the shared watches (a list, then a watch, of each collection), besides the try's one
    # check before it submits (has its job already succeeded?) and the pod log reader's, once admitted
    reads = _task_reads(kueue, namespace)
    name = first["metadata"]["name"]
    assert sorted(read for read in reads if read[1] in ("mpijobs", "workloads")) == [  # the watches start concurrently
        ("get", "mpijobs", name, ""), ("list", "mpijobs", None, ""), ("list", "workloads", None, ""),
        ("watch", "mpijobs", None, ""), ("watch", "workloads", None, "")], reads
    assert sorted(read for read in reads if read[1] == "pods" and read[3] == "") == [("list", "pods", None, ""),
                                                                                   ("watch", "pods", None, "")], reads


def _task_reads(cluster, namespace: str) -> list[tuple]:
    """The reads the task made in ``namespace`` (the test's own requests, by urllib, left out), from the
    API server's audit log, in order (watches, which last, sorted last): (verb, resource or resource/subresource,
    name, the job the label selector names: "" for the shared watches' selector, which names none)."""
    reads = []
    for event in cluster.audited(namespace):
        if event["verb"] not in ("get", "list", "watch") or event["userAgent"].startswith("Python-urllib"):
            continue
        ref, query = event["objectRef"], parse_qs(urlparse(event["requestURI"]).query)
        selector = query.get("labelSelector", [""])[0]
        reads.append((event["verb"], "/".join(filter(None, [ref["resource"], ref.get("subresource")])),
                      ref.get("name"), selector.partition("=")[2]))
    return sorted(reads, key=lambda read: read[0] == "watch")


def test_max_queue_s_fails_with_kueues_reason_and_deletes_the_job(kueue, namespace, run_dag, capfd):
    def play() -> None:
        KueueDouble(kueue, namespace).conditions(_condition("QuotaReserved", False, "Pending", NO_QUOTA, "01"))

    player = threading.Thread(target=play, daemon=True)
    player.start()
    result = run_dag("ml_test_kueue_max_queue")
    player.join(30)
    assert result.task_states["train"] == "failed"
    out = capfd.readouterr().out
    assert "not admitted by its queue within max_queue_s (10 s)" in out
    assert f"the queue's last reason: Pending: {NO_QUOTA}" in out
    assert kueue.request("GET", resource_path(*MPIJOB, namespace))["items"] == [], "the job was deleted"
    reads = _task_reads(kueue, namespace)
    assert not [read for read in reads if read[1] == "pods/log" or read[1] == "pods" and read[3]], \
        "no log read while queued"


def test_a_job_queued_past_the_tasks_execution_timeout_fails_the_task_and_is_deleted(
        kueue, namespace, run_dag, capfd):
    """execution_timeout is the task's wall clock, queue included (max_queue_s is the queue's own, sooner, deadline)."""
    def play() -> None:
        KueueDouble(kueue, namespace).conditions(_condition("QuotaReserved", False, "Pending", NO_QUOTA, "01"))

    player = threading.Thread(target=play, daemon=True)
    player.start()
    result = run_dag("ml_test_kueue_execution_timeout")
    player.join(30)
    assert result.task_states["train"] == "failed"
    out = capfd.readouterr().out
    # the job was submitted and waited in Kueue's queue, and the task's own timeout (not another error) ended it
    assert f"Job is QUEUED: Pending: {NO_QUOTA}" in out and "AirflowTaskTimeout" in out, out[-3000:]
    assert kueue.request("GET", resource_path(*MPIJOB, namespace))["items"] == [], "the job was deleted"


def test_queue_labels_and_suspension_on_every_backend_kueue_manages(kueue_cluster, namespace):
    identity = JobIdentity("kueue", "train", "manual__1")
    jobs = get_backend("mpijob", api_client=kueue_cluster.api_client(), namespace=namespace, queueing="kueue")
    jobs.submit(identity.name, SPEC, identity.labels())
    stored = jobs.get("MPIJob", identity.name)  # what the API server kept after schema validation
    assert stored["metadata"]["labels"][QUEUE_LABEL] == "team-a"
    assert stored["spec"]["runPolicy"]["suspend"] is True
    assert "queue" not in stored["spec"]["runPolicy"]["schedulingPolicy"]
    lightgbm = SPEC.model_copy(update={"framework": "lightgbm"})
    indexed = get_backend("indexed-job", api_client=kueue_cluster.api_client(), namespace=namespace,
                          queueing="kueue")
    job, service = yaml.safe_load_all(indexed.render(identity.name, lightgbm, identity.labels()))
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"][PRIORITY_LABEL] == "high-priority"
    assert QUEUE_LABEL not in service["metadata"]["labels"]
    assert "priorityClassName" not in job["spec"]["template"]["spec"]  # Kueue's class, not a pod PriorityClass
    volcano = get_backend("volcano", api_client=kueue_cluster.api_client(), namespace=namespace, queueing="kueue")
    with pytest.raises(JobSubmissionError, match="queueing: Kueue does not manage Job objects of the volcano"):
        volcano.submit(identity.name, SPEC, identity.labels())
    for field, scheduling in [("scheduling.queue", {"queue": "team a"}),
                              ("scheduling.priority_class", {"queue": "q", "priority_class": "-high"}),
                              ("scheduling.queue", {})]:
        spec = SPEC.model_copy(update={"scheduling": SPEC.scheduling.model_copy(update={"priority_class": None,
                                                                                        **scheduling})})
        if not scheduling:
            spec = SPEC.model_copy(update={"scheduling": type(SPEC.scheduling)()})
        with pytest.raises(JobSubmissionError, match=f"^{field}: "):
            jobs.submit("kueue-bad", spec, {})
    with pytest.raises(ValueError, match="^queueing: 'volcano' is not a queueing system"):
        get_backend("mpijob", api_client=kueue_cluster.api_client(), namespace=namespace, queueing="volcano")


@pytest.mark.parametrize("kind,framework", [("mpijob", "horovod"), ("indexed-job", "lightgbm")])
def test_the_shipped_role_covers_following_a_job_kueue_admits(kind, framework, kueue_cluster, monkeypatch):
    """As a user holding exactly deploy/kubernetes/rbac.yaml's Role: submit, status (a list of Workloads),
    the shared watches (job and Workload), delete; without its workloads rule the follow is refused."""
    namespace = new_namespace(kueue_cluster, monkeypatch, kueue_cluster.kubeconfig_for(TRAINER_TOKEN))
    [role] = [doc for doc in yaml.safe_load_all(RBAC.read_text()) if doc["kind"] == "Role"]
    kueue_cluster.grant(namespace, "trainer", role["rules"])
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT", json.dumps({"conn_type": "ml_training", "extra": {
        "namespace": namespace, "image": "registry.example/train:1", "queueing": "kueue"}}))
    backend = TrainingBackendHook().get_backend(kind)
    name = JobIdentity("rbac", f"kueue-{framework}", "manual__1").name
    spec = SPEC.model_copy(update={"framework": framework})
    assert backend.submit(name, spec, {}) is True
    waiting = JobStatus(JobState.QUEUED, "waiting for Kueue to create the job's Workload")
    assert backend.status(name) == waiting
    assert asyncio.run(asyncio.wait_for(_first_status(backend, name), 60)) == waiting
    backend.delete(name)
    with pytest.raises(JobNotFound):
        backend.status(name)

    without = [rule for rule in role["rules"] if "workloads" not in rule["resources"]]
    other = new_namespace(kueue_cluster, monkeypatch, kueue_cluster.kubeconfig_for(TRAINER_TOKEN))
    kueue_cluster.grant(other, "trainer", without)
    refused = get_backend(kind, api_client=kueue_cluster.api_client(TRAINER_TOKEN), namespace=other,
                          queueing="kueue")
    refused.submit(name, spec, {})
    with pytest.raises(BackendAccessError, match='list Kueue Workloads: 403 .*"workloads"'):
        refused.status(name)


async def _first_status(backend, name: str):
    async for status in backend.statuses(name, interval=1.0):
        return status


def test_followers_of_queued_jobs_read_nothing_beyond_the_shared_watches(kueue, namespace):
    """Three queued jobs followed at once, Kueue changing their Workloads: one list and one watch of the
    MPIJobs, of the Workloads and of the pods in all, no per-job read (the sync client makes no call)."""
    CollectionWatcher._shared.clear()
    backend = TrainingBackendHook().get_backend("mpijob")  # as a follower builds it: from the connection
    names = [JobIdentity("watch", f"queued-{i}", "manual__1").name for i in range(3)]
    for name in names:
        backend.submit(name, SPEC, {})
    sync_calls, real = [], backend.api.call_api
    backend.api.call_api = lambda *args, **kwargs: sync_calls.append(args[0]) or real(*args, **kwargs)

    async def follow(name: str) -> list[JobStatus]:
        seen = []
        async for status in backend.statuses(name, interval=0.5):
            if not seen or seen[-1] != status:
                seen.append(status)
            if status.message == f"Pending: {NO_QUOTA}":
                return seen

    async def scenario():
        followers = [asyncio.create_task(follow(name)) for name in names]
        for _ in names:
            kueue_double = await asyncio.to_thread(KueueDouble, kueue, namespace, skip=len(_history))
            _history.append(kueue_double.name)
            await asyncio.to_thread(kueue_double.conditions, _condition("QuotaReserved", False, "Pending", NO_QUOTA, "01"))
        seen = await asyncio.wait_for(asyncio.gather(*followers), 120)
        return seen, sum(watcher.requests for watcher in CollectionWatcher._shared.values()), \
            len(CollectionWatcher._shared)

    _history: list[str] = []
    seen, requests, watchers = asyncio.run(scenario())
    assert sorted(_history) == sorted(names)
    for statuses in seen:
        assert statuses[-1] == JobStatus(JobState.QUEUED, f"Pending: {NO_QUOTA}")
    assert (watchers, requests) == (3, 6), "one list and one watch per collection (jobs, Workloads, pods)"
    assert sync_calls == [], "no per-job read"


def test_a_disrupted_pod_of_a_job_kueue_evicts_is_left_to_kueue(kueue, namespace):
    """Kueue evicts a job whose pod is being disrupted (e.g. its spot node shuts down): the job stays
    PREEMPTED with reason Requeued, which the follower waits through, not a preemption to resubmit."""
    backend = TrainingBackendHook().get_backend("mpijob")
    name = JobIdentity("spot", "kueue", "manual__1").name
    backend.submit(name, SPEC, {})
    double = KueueDouble(kueue, namespace)
    job = double.job
    kueue.request("POST", f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"{name}-worker-0", "labels": job["metadata"]["labels"], "ownerReferences": [{
                "apiVersion": job["apiVersion"], "kind": job["kind"], "name": name, "uid": job["metadata"]["uid"],
                "controller": True}]},
        "spec": {"nodeName": "fake-node", "containers": [{"name": "worker", "image": "img:1"}]}})
    kueue.patch_status(f"/api/v1/namespaces/{namespace}/pods/{name}-worker-0", {"conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "message": "node shutdown",
         "lastTransitionTime": "2026-11-26T00:00:00Z"}]})
    assert backend.status(name).message.startswith(f"pod {name}-worker-0 is disrupted")  # queued: not left to Kueue
    double.conditions(_condition("Evicted", True, "PodsReadyTimeout", "pods not ready", "05"))

    async def first() -> JobStatus:
        async for status in backend.statuses(name, interval=0.5):
            return status

    for status in (backend.status(name), asyncio.run(asyncio.wait_for(first(), 60))):
        assert (status.state, status.reason) == (JobState.PREEMPTED, REQUEUED), status
        assert status.message.startswith("evicted by Kueue (PodsReadyTimeout: pods not ready)")
