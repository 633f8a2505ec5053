"""A sync task's wait on a Kubernetes backend: ``SyncDriver.run()`` drives ``follow_async`` in an event
loop of its own, so it follows through the shared watch. Each run's loop opens its own watch: runs one
after another (a resubmission) and runs in two threads at once all see their jobs' changes, and no
watch, queue or event of one loop is used by another."""

from __future__ import annotations

import logging
import threading

import pytest
from kube_cluster import resource_path

from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.jobs.drivers import SyncDriver
from airflow_ml_provider.jobs.follow import Action, Decision, Follower, FollowOptions
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState
from support import wait_for

pytestmark = pytest.mark.integration

SPEC = TrainingJobSpec(framework="horovod", command=["python", "t.py"], num_workers=2, image="img:1")
LOG = logging.getLogger(__name__)


class Run(threading.Thread):
    """One sync wait for ``name`` in a thread of its own, recording the states it saw. The interval is
    long: only the watch can bring the job's changes within the test's bounds."""

    def __init__(self, backend, name: str):
        super().__init__(daemon=True, name=f"follow {name}")
        self.states: list[JobState] = []
        self.step: Decision | None = None
        self.driver = SyncDriver(Follower(FollowOptions(poll_interval=300)), LOG, backend, name, owns_job=False,
                                 on_step=lambda step: self.states.append(step.status.state))

    def run(self) -> None:
        self.step = self.driver.run()


def _play_mpi_operator(kube_cluster, namespace: str, name: str) -> None:
    path = resource_path("kubeflow.org/v2beta1", "MPIJob", namespace, name)
    kube_cluster.patch_status(path, {"conditions": [
        {"type": "Running", "status": "True", "lastTransitionTime": "2026-11-21T00:00:00Z"}]})
    kube_cluster.patch_status(path, {"conditions": [
        {"type": "Running", "status": "False", "lastTransitionTime": "2026-11-21T00:01:00Z"},
        {"type": "Succeeded", "status": "True", "lastTransitionTime": "2026-11-21T00:01:00Z"}]})


def _follow_all(kube_cluster, namespace: str, backend, names: list[str]) -> list[Run]:
    """Follow ``names`` at once; once each follower has seen its job pending, play the MPI operator."""
    runs = [Run(backend, name) for name in names]
    for run in runs:
        run.start()
    wait_for(lambda: all(run.states for run in runs), timeout=60, what="every follower's first status")
    for name in names:
        _play_mpi_operator(kube_cluster, namespace, name)
    for run in runs:
        run.join(60)
        assert not run.is_alive(), f"{run.name} missed the job's end"
    return runs


def test_sync_waits_follow_through_the_watch_one_after_another_and_side_by_side(kube_cluster, namespace):
    backend = TrainingBackendHook().get_backend("mpijob")  # as the operator builds it: with the async client
    identities = [JobIdentity("sync", f"train-{i}", "manual__1") for i in range(3)]
    for identity in identities:
        backend.submit(identity.name, SPEC, identity.labels())
    names = [identity.name for identity in identities]
    runs = [*_follow_all(kube_cluster, namespace, backend, names[:1]),  # one, then two side by side
            *_follow_all(kube_cluster, namespace, backend, names[1:])]
    for run in runs:
        assert run.step.action is Action.FINISH, run.step.message
        assert run.states[0] is JobState.PENDING and run.states[-1] is JobState.SUCCEEDED, run.states
