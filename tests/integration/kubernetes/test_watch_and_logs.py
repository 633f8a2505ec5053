"""Following jobs over a real watch, kill while deferred, vanished jobs, and pod logs via a Node."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml
from kube_cluster import play_mpi_operator, resource_path

from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.base import JobNotFound
from airflow_ml_provider.jobs.backends.kubernetes.watch import CollectionWatcher
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState
from airflow_ml_provider.labels import JOB_NAME as JOB_NAME_LABEL
from airflow_ml_provider.logs.source import LogLine
from airflow_ml_provider.triggers.training_job import TrainingJobTrigger

pytestmark = pytest.mark.integration

IDENTITY = JobIdentity("watch", "train", "manual__1")
NAME = IDENTITY.name
SPEC = TrainingJobSpec(framework="horovod", command=["python", "t.py"], num_workers=2, image="img:1")


@pytest.fixture
def mpijobs(kube_cluster, namespace):
    jobs = get_backend("mpijob", api_client=kube_cluster.api_client(), namespace=namespace)
    jobs.submit(NAME, SPEC, IDENTITY.labels())
    return jobs


def path(namespace: str) -> str:
    return resource_path("kubeflow.org/v2beta1", "MPIJob", namespace, NAME)


def _succeed(kube_cluster, namespace: str) -> None:
    """Play the MPI operator: the job runs, then succeeds."""
    kube_cluster.patch_status(path(namespace), {"conditions": [
        {"type": "Running", "status": "True", "lastTransitionTime": "2026-11-21T00:00:00Z"}]})
    kube_cluster.patch_status(path(namespace), {"conditions": [
        {"type": "Running", "status": "False", "lastTransitionTime": "2026-11-21T00:01:00Z"},
        {"type": "Succeeded", "status": "True", "lastTransitionTime": "2026-11-21T00:01:00Z"}]})


async def _states_until_terminal(backend, name: str, action, interval: float = 30) -> list[JobState]:
    """Follow ``name`` as a follower does (``Backend.statuses``), run ``action`` once it is followed."""
    states = []
    async for status in backend.statuses(name, interval):
        states.append(status.state)
        if len(states) == 1:
            await asyncio.to_thread(action)
        if status.state.is_terminal:
            return states


def test_statuses_follow_jobs_through_one_shared_watch(mpijobs, kube_cluster, namespace):
    """Three followers of three jobs in one process: one list and one watch of the jobs (and one of their
    pods, for disruptions) in all, no per-job polling."""
    CollectionWatcher._shared.clear()
    backend = TrainingBackendHook().get_backend("mpijob")  # as a follower builds it: from the connection
    others = [JobIdentity("watch", f"train-{i}", "manual__1") for i in range(2)]
    for identity in others:
        mpijobs.submit(identity.name, SPEC, identity.labels())

    async def scenario():
        followers = [_states_until_terminal(backend, NAME, lambda: _succeed(kube_cluster, namespace))]
        followers += [_states_until_terminal(backend, identity.name, lambda: None, interval=0.5)
                      for identity in others]
        first = asyncio.create_task(followers[0])
        rest = [asyncio.create_task(follower) for follower in followers[1:]]
        states = await asyncio.wait_for(first, 60)
        watchers = list(CollectionWatcher._shared.values())
        for identity in others:
            await asyncio.to_thread(mpijobs.delete, identity.name)
        for task in rest:
            with pytest.raises(JobNotFound):
                await asyncio.wait_for(task, 60)
        return states, {watcher.path.rsplit("/", 1)[-1]: watcher.requests for watcher in watchers}

    states, requests = asyncio.run(scenario())
    assert states[0] is JobState.PENDING and states[-2:] == [JobState.RUNNING, JobState.SUCCEEDED]
    assert requests == {"mpijobs": 2, "pods": 2}, "one list and one watch of each: no per-job polling"


def test_the_shared_watch_lists_in_pages_and_keeps_a_slim_copy_of_each_job(mpijobs, kube_cluster, namespace,
                                                                          monkeypatch):
    """Five jobs listed two at a time by the real API server (its limit/continue), and what the watch holds of
    each is what the status core reads, not the pod templates: bounded memory per job at 10,000 jobs."""
    monkeypatch.setattr("airflow_ml_provider.jobs.backends.kubernetes.watch.PAGE", 2)
    CollectionWatcher._shared.clear()
    backend = TrainingBackendHook().get_backend("mpijob")
    others = [JobIdentity("watch", f"page-{i}", "manual__1") for i in range(4)]
    for identity in others:
        mpijobs.submit(identity.name, SPEC, identity.labels())

    async def scenario():
        follower = asyncio.create_task(_states_until_terminal(backend, NAME, lambda: _succeed(kube_cluster, namespace)))
        states = await asyncio.wait_for(follower, 60)
        [watcher] = [w for w in CollectionWatcher._shared.values() if w.path.endswith("/mpijobs")]
        return states, watcher.requests, watcher.objects

    states, requests, kept = asyncio.run(scenario())
    assert states[-1] is JobState.SUCCEEDED
    assert requests == 4, "three pages of at most two jobs, then one watch"
    assert sorted(kept) == sorted([NAME] + [identity.name for identity in others])
    assert all("containers" not in json.dumps(obj) for obj in kept.values()), "no pod template is kept"
    assert kept[NAME]["status"]["conditions"][-1]["type"] == "Succeeded" and kept[NAME]["metadata"]["uid"]


def test_a_job_deleted_behind_our_back_ends_the_statuses_as_vanished(mpijobs, kube_cluster, namespace):
    backend = TrainingBackendHook().get_backend("mpijob")
    with pytest.raises(JobNotFound, match="does not exist"):
        asyncio.run(asyncio.wait_for(_states_until_terminal(
            backend, NAME, lambda: kube_cluster.request("DELETE", path(namespace))), 60))


def test_killing_the_deferred_task_deletes_the_job(mpijobs, namespace):
    asyncio.run(TrainingJobTrigger(NAME, "mpijob").on_kill())
    with pytest.raises(JobNotFound):
        mpijobs.status(NAME)


def _pod(namespace: str, name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {JOB_NAME_LABEL: NAME}},
            "spec": {"nodeName": "fake-node", "containers": [{"name": "worker", "image": "img:1"}]}}


def test_pod_logs_come_through_the_api_server_in_time_order_and_resume_without_repeats(
        mpijobs, kube_cluster, kubelet, namespace):
    for pod in ("w-0", "w-1"):
        kube_cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", _pod(namespace, pod))
    kubelet.append(namespace, "w-0", "worker", "a", "2026-11-21T10:00:00.100000000Z")
    kubelet.append(namespace, "w-1", "worker", "b", "2026-11-21T10:00:00.2Z")
    kubelet.append(namespace, "w-0", "worker", "c", "2026-11-21T10:00:01.5Z")
    kubelet.append(namespace, "w-0", "worker", "c-again", "2026-11-21T10:00:01.5Z")
    source = mpijobs.log_source(NAME)
    first = source.read()
    assert first.lines == [LogLine("w-0", "a"), LogLine("w-1", "b"), LogLine("w-0", "c"), LogLine("w-0", "c-again")]

    kubelet.append(namespace, "w-1", "worker", "d", "2026-11-21T10:00:01.7Z")
    kubelet.append(namespace, "w-0", "worker", "e", "2026-11-21T10:00:02Z")
    second = source.read(first.cursor)
    assert second.lines == [LogLine("w-1", "d"), LogLine("w-0", "e")]
    assert source.read(second.cursor).lines == []


@pytest.mark.parametrize("dag_id", ["ml_test_mpijob", "ml_test_mpijob_sync"], ids=["deferred", "sync"])
def test_an_operator_run_on_mpijob_end_to_end(mpijobs, kube_cluster, kubelet, namespace, run_dag, dag_id):
    """dag.test() of a Horovod task on the MPIJob backend while the test plays the MPI operator: deferred
    (the trigger follows the job), and sync (the task's process does, through the shared watch)."""
    mpijobs.delete(NAME)
    done = play_mpi_operator(kube_cluster, kubelet, namespace,
                             ['{"event": "metrics", "step": 1, "loss": 0.5}', '{"event": "result", "accuracy": 0.93}'])
    result = run_dag(dag_id)
    assert done.wait(5) and result.state == "success", result.task_states
    assert result.xcom["train"]["backend"] == "mpijob"
    assert {"loss": 0.5, "accuracy": 0.93}.items() <= result.xcom["train"]["metrics"].items()

    from airflow.models.renderedtifields import RenderedTaskInstanceFields as Rendered
    from airflow.utils.session import create_session

    with create_session() as session:
        rendered = session.query(Rendered).filter_by(dag_id=dag_id, run_id=result.run_id).one()
        manifest = yaml.safe_load(rendered.rendered_fields["manifest"])
    assert manifest["kind"] == "MPIJob" and manifest["metadata"]["namespace"] == namespace, "the UI shows the manifest"
