"""MPIJob on an API server as most Kubeflow installs are: the MPIJob CRD, no Volcano (issue 11, item 3).

Gang status is looked up only for a job that asks for a gang scheduler, by a GET of the PodGroup its
controller names after the job; a PodGroup that cannot be read (no CRD: 404, no RBAC: 403) means
"no gang information", said once, and never fails the wait.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from kube_cluster import TRAINER_TOKEN, new_namespace, resource_path

from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState

pytestmark = pytest.mark.integration

NAME = "aml-train-gang"
SPEC = TrainingJobSpec(framework="horovod", command=["python", "t.py"], num_workers=2, image="img:1")
PLUGINS = "scheduling.x-k8s.io/v1alpha1"
RUNNING = {"conditions": [{"type": "Running", "status": "True", "lastTransitionTime": "2026-11-21T00:00:00Z"}]}
SUCCEEDED = {"conditions": [{"type": "Succeeded", "status": "True", "lastTransitionTime": "2026-11-21T00:01:00Z"}]}


@pytest.fixture
def kubeflow_namespace(kubeflow_cluster, monkeypatch) -> str:
    return new_namespace(kubeflow_cluster, monkeypatch)


def _spy(backend) -> list[str]:
    """The paths of the REST calls the backend makes from now on (the calls still go to the server)."""
    paths, real = [], backend.api.call_api

    def call_api(path, method, *args, path_params=None, **kwargs):
        paths.append(path.format(**(path_params or {})))
        return real(path, method, *args, path_params=path_params, **kwargs)

    backend.api.call_api = call_api
    return paths


def _podgroup_reads(paths: list[str]) -> int:
    return sum("/podgroups" in path for path in paths)


def test_the_default_install_runs_mpijobs_without_any_podgroup_lookup(kubeflow_cluster, kubeflow_namespace):
    jobs = get_backend("mpijob", api_client=kubeflow_cluster.api_client(), namespace=kubeflow_namespace)
    jobs.submit(NAME, SPEC, {})
    paths = _spy(jobs)
    assert jobs.status(NAME).state is JobState.PENDING
    kubeflow_cluster.patch_status(resource_path(jobs.api_version, jobs.kind, kubeflow_namespace, NAME), RUNNING)
    assert jobs.status(NAME).state is JobState.RUNNING
    assert _podgroup_reads(paths) == 0


def test_podgroups_the_server_does_not_serve_mean_no_gang_information_said_once(
        kubeflow_cluster, kubeflow_namespace, caplog):
    """The MPI operator configured for Volcano on a cluster whose Volcano CRDs are gone (404)."""
    jobs = get_backend("mpijob", api_client=kubeflow_cluster.api_client(), namespace=kubeflow_namespace,
                       gang_scheduler="volcano")
    jobs.submit(NAME, SPEC, {})
    paths = _spy(jobs)
    with caplog.at_level(logging.WARNING):
        states = {jobs.status(NAME).state for _ in range(5)}
    assert states == {JobState.PENDING}
    warnings = [r.getMessage() for r in caplog.records if "gang-scheduling status is not reported" in r.getMessage()]
    assert len(warnings) == 1 and "404" in warnings[0], warnings
    assert _podgroup_reads(paths) == 1, "after a refusal the namespace is not asked again for a while"


def test_podgroups_without_rbac_mean_no_gang_information_said_once(kubeflow_cluster, kubeflow_namespace, caplog):
    """A service account allowed its MPIJobs but not PodGroups (403)."""
    kubeflow_cluster.grant(kubeflow_namespace, "trainer", [
        {"apiGroups": ["kubeflow.org"], "resources": ["mpijobs"], "verbs": ["get", "list", "watch", "create", "delete"]}])
    jobs = get_backend("mpijob", api_client=kubeflow_cluster.api_client(TRAINER_TOKEN), namespace=kubeflow_namespace,
                       gang_scheduler="scheduler-plugins-scheduler")
    jobs.submit(NAME, SPEC, {})
    with caplog.at_level(logging.WARNING):
        states = {jobs.status(NAME).state for _ in range(3)}
    assert states == {JobState.PENDING}
    warnings = [r.getMessage() for r in caplog.records if "gang-scheduling status is not reported" in r.getMessage()]
    assert len(warnings) == 1 and 'cannot get resource "podgroups"' in warnings[0], warnings


def _podgroup(namespace: str) -> dict:
    """What the MPI operator creates for scheduler-plugins (pkg/controller/podgroup.go, SchedulerPluginsCtrl)."""
    return {"apiVersion": PLUGINS, "kind": "PodGroup", "metadata": {"name": NAME, "namespace": namespace},
            "spec": {"minMember": 3}}


def test_a_scheduler_plugins_gang_that_cannot_be_placed_is_gang_pending_while_the_watch_follows_the_job(
        kubeflow_cluster, kubeflow_namespace, monkeypatch):
    """Through the backend a follower builds from the connection (shared watch, async client)."""
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT", json.dumps(
        {"conn_type": "ml_training", "extra": {"gang_scheduler": "scheduler-plugins-scheduler"}}))
    jobs = TrainingBackendHook().get_backend("mpijob")
    jobs.submit(NAME, SPEC, {})
    stored = jobs.get("MPIJob", NAME)
    launcher = stored["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    assert launcher["schedulerName"] == "scheduler-plugins-scheduler"
    assert stored["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 3
    groups = resource_path(PLUGINS, "PodGroup", kubeflow_namespace)
    kubeflow_cluster.request("POST", groups, _podgroup(kubeflow_namespace))
    kubeflow_cluster.patch_status(f"{groups}/{NAME}", {"phase": "Pending"})  # the coscheduling controller
    job_path = resource_path(jobs.api_version, jobs.kind, kubeflow_namespace, NAME)

    async def follow() -> list[tuple[JobState, str]]:
        seen = []
        async for status in jobs.statuses(NAME, interval=0.5):
            seen.append((status.state, status.message))
            if status.state is JobState.GANG_PENDING and len(seen) == 4:  # 2 s of 0.5 s intervals
                await asyncio.to_thread(kubeflow_cluster.patch_status, job_path, RUNNING)
            elif status.state is JobState.RUNNING:
                await asyncio.to_thread(kubeflow_cluster.patch_status, job_path, SUCCEEDED)
            elif status.state.is_terminal:
                return seen

    paths = _spy(jobs)
    seen = asyncio.run(asyncio.wait_for(follow(), 60))
    assert seen[:4] == [(JobState.GANG_PENDING, f"PodGroup {NAME} is Pending: 0/3 pods running")] * 4
    states = [state for state, _ in seen]
    assert states[-2:] == [JobState.RUNNING, JobState.SUCCEEDED]
    assert _podgroup_reads(paths) == 1, "read once, then again only every 30 s while pending; never once running"
