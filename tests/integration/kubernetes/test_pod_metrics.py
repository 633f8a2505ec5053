"""A Kubernetes job's pods' CPU and memory in its training view, from the cluster's metrics API: a real
kube-apiserver with metrics-server's stand-in registered as its aggregated metrics.k8s.io (tests/metrics_server.py,
each pod's container a real process here), and the session's cluster, which serves no such API. The follow core
asks while the job runs, one list by the job's label a time; a cluster without the API, or refusing it, is said
once and never asked again."""

from __future__ import annotations

import asyncio
import copy
import itertools
import logging
import subprocess
import sys
import threading
import time
from html import escape
from urllib.parse import quote

import pytest
from kube_cluster import TRAINER_TOKEN, apiserver_binary, new_namespace, resource_path, start_cluster
from metrics_server import MetricsServer

from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.jobs.backends.kubernetes.pod_metrics import COMPLETION_INDEX, NO_API, REFUSED_NOTE
from airflow_ml_provider.jobs.drivers import SyncDriver, follow_async
from airflow_ml_provider.jobs.follow import Action, Follower, FollowOptions
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.labels import JOB_NAME as JOB_NAME_LABEL
from airflow_ml_provider.plugins.training_view import page
from airflow_ml_provider.plugins.view_app import _from_follow_state
from support import wait_for

pytestmark = pytest.mark.integration

SPEC = TrainingJobSpec(framework="lightgbm", command=["python", "train.py"], num_workers=2, image="img:1")
LOG = logging.getLogger(__name__)
SPIN, SLEEP = "while True: pass", "import time; time.sleep(300)"
TI = {"dag_id": "d", "task_id": "train", "state": "running"}
NODE = "node-a"  # the pods' Node, which exists (a pod whose node is gone reads as PREEMPTED)


@pytest.fixture(scope="module")
def metrics_cluster():
    """An API server of its own (an aggregated API registered cluster-wide would be every other test's too), with
    the stand-in registered as metrics.k8s.io."""
    binary = apiserver_binary()
    if binary is None:
        pytest.skip("no kube-apiserver/etcd: run `make kube-apiserver` (scripts/build_kube_apiserver.sh)")
    cluster = start_cluster(binary, crds=[])
    server = MetricsServer(cluster)
    try:
        server.register()
        cluster.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        yield cluster, server
    finally:
        server.stop()
        cluster.stop()


def _submitted(kube_cluster, namespace: str) -> tuple:
    backend = TrainingBackendHook().get_backend("indexed-job")
    name = JobIdentity("metrics", "train", "manual__1").name
    assert backend.submit(name, SPEC, {}) is True
    return backend, name, resource_path("batch/v1", "Job", namespace, name)


def _pods(cluster, namespace: str, name: str) -> list[str]:
    """The Job controller's part: a pod per index, with the template's labels and the completion-index label."""
    job = cluster.request("GET", resource_path("batch/v1", "Job", namespace, name))
    labels = job["spec"]["template"]["metadata"]["labels"]
    pods = []
    for index, suffix in enumerate(("x7k2p", "b4mq9")):
        pod = f"{name}-{index}-{suffix}"
        cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "labels": {**labels, COMPLETION_INDEX: str(index)}},
            "spec": {"nodeName": NODE, "containers": [{"name": "worker", "image": "img:1"}]}})
        pods.append(pod)
    return pods


def test_a_followed_job_s_view_shows_each_pod_s_cpu_and_memory(metrics_cluster, monkeypatch):
    cluster, server = metrics_cluster
    namespace = new_namespace(cluster, monkeypatch)
    backend, name, path = _submitted(cluster, namespace)
    pods = _pods(cluster, namespace, name)
    workers = [subprocess.Popen([sys.executable, "-c", code]) for code in (SPIN, SLEEP)]  # index 0 spins
    try:
        for pod, process in zip(pods, workers):
            server.measure(namespace, pod, "worker", process.pid)
        wait_for(lambda: server.measured(namespace, pods), 60, "two samples of each pod")
        # followed as a deferred task's trigger follows it: its durable state saved (on_progress) as it changes
        follower, follower_steps, saved = Follower(FollowOptions(poll_interval=0.5)), [], []

        async def save(state: dict) -> None:
            saved.append(copy.deepcopy(state))

        run = threading.Thread(target=lambda: follower_steps.append(asyncio.run(
            follow_async(follower, LOG, backend, name, on_progress=save))), daemon=True)
        run.start()
        cluster.patch_status(path, {"active": 2})
        sample = wait_for(lambda: follower.tracker.resources, 60, "the pods' sample")
        cluster.patch_status(path, {"conditions": [{"type": "Complete", "status": "True",
                                                    "lastTransitionTime": "2026-12-03T00:00:00Z"}], "succeeded": 2})
        run.join(60)
    finally:
        for process in workers:
            process.kill()
            process.wait()
    assert follower_steps and follower_steps[0].action is Action.FINISH, follower_steps
    use = sample["workers"]
    assert sample["source"] == "metrics.k8s.io" and set(use) == {"worker 0", "worker 1"}, sample
    # spinning against sleeping, the processes' own CPU times over the stand-in's window (a share of a core)
    assert use["worker 0"]["cpu"] > 4 * max(use["worker 1"]["cpu"], 1.0), use
    assert all(worker["mem_mib"] > 1 and worker["pods"] == 1 for worker in use.values()), use
    listed = [request for request in server.requests if "/pods" in request]
    assert listed and all(f"labelSelector={quote(f'{JOB_NAME_LABEL}={name}', safe='')}" in request
                          for request in listed), listed
    assert saved and saved[-1]["metrics"]["resources"] == sample, "the sample saved where a deferred view reads it"
    html = page({"ti": TI, "view": _from_follow_state(saved[-1])})
    assert "From the cluster's metrics API (metrics.k8s.io)" in html
    assert f"<tr><td>worker 0</td><td>{use['worker 0']['cpu']}</td><td>{use['worker 0']['mem_mib']}</td>" in html


def _polled_with_the_clock_far_ahead(backend, name: str, rounds: int = 4, owns_job: bool = True) -> tuple:
    """Rounds of the sync driver, its clock 20 s later each time it is read: every round is past the interval."""
    ticks = itertools.count(time.time(), 20.0)
    driver = SyncDriver(Follower(), LOG, backend, name, owns_job=owns_job, clock=lambda: next(ticks))
    return [driver.poll() for _ in range(rounds)], driver.follower


def _metrics_asked(cluster, namespace: str) -> list[dict]:
    return [event for event in cluster.audited(namespace) if "/apis/metrics.k8s.io/" in event["requestURI"]]


def test_a_cluster_without_the_metrics_api_is_said_once_and_never_asked_again(kube_cluster, namespace):
    backend, name, path = _submitted(kube_cluster, namespace)
    kube_cluster.patch_status(path, {"active": 2})
    _polled_with_the_clock_far_ahead(backend, name, owns_job=False)  # a sensor's: another task's job, not asked
    assert _metrics_asked(kube_cluster, namespace) == []
    steps, follower = _polled_with_the_clock_far_ahead(backend, name)
    said = [warning for step in steps for warning in step.warnings if "metrics.k8s.io" in warning]
    assert said == [f"Resource use not shown: {NO_API}"]
    asked = _metrics_asked(kube_cluster, namespace)
    assert [event["responseStatus"]["code"] for event in asked] == [404], asked
    html = page({"ti": TI, "view": _from_follow_state(Follower(state=follower.state).state)})  # after a restart
    assert html.count(escape(NO_API)) == 1
    # another job of the same backend (a search's next trial): neither asked nor said again
    other = JobIdentity("metrics", "train", "manual__2").name
    assert backend.submit(other, SPEC, {}) is True
    kube_cluster.patch_status(resource_path("batch/v1", "Job", namespace, other), {"active": 2})
    steps, _ = _polled_with_the_clock_far_ahead(backend, other)
    assert not [warning for step in steps for warning in step.warnings if "metrics.k8s.io" in warning]
    assert len(_metrics_asked(kube_cluster, namespace)) == 1


def test_a_refusal_is_said_once_with_what_to_grant(kube_cluster, monkeypatch):
    namespace = new_namespace(kube_cluster, monkeypatch, kube_cluster.kubeconfig_for(TRAINER_TOKEN))
    kube_cluster.grant(namespace, "trainer", [{"apiGroups": ["batch"], "resources": ["jobs"],
                                              "verbs": ["create", "get", "list", "watch", "delete"]},
                                             {"apiGroups": [""], "resources": ["services"], "verbs": ["create"]}])
    backend, name, path = _submitted(kube_cluster, namespace)
    kube_cluster.patch_status(path, {"active": 2})
    steps, _ = _polled_with_the_clock_far_ahead(backend, name)
    said = [warning for step in steps for warning in step.warnings if "metrics.k8s.io" in warning]
    assert said == [f"Resource use not shown: {REFUSED_NOTE.format(status=403)}"]
    asked = _metrics_asked(kube_cluster, namespace)
    assert [event["responseStatus"]["code"] for event in asked] == [403], asked
