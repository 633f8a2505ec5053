"""Every backend state maps explicitly onto JobState, read back from a real API server's /status."""

from __future__ import annotations

import pytest
from kube_cluster import resource_path

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState

pytestmark = pytest.mark.integration

IDENTITY = JobIdentity("states", "train", "manual__1")
T0, T1 = "2026-11-21T00:00:00Z", "2026-11-21T00:01:00Z"
REASON = "3/3 tasks in gang unschedulable: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."


def condition(kind: str, when: str = T1, status: str = "True", reason: str = "", message: str = "") -> dict:
    """A status condition; empty strings are left out (this Kubernetes 1.20 build validates "" as null)."""
    fields = {"type": kind, "status": status, "lastTransitionTime": when, "reason": reason, "message": message}
    return {key: value for key, value in fields.items() if value}


MPIJOB_CASES = [
    ([], JobState.PENDING),
    ([condition("Created", T0)], JobState.PENDING),
    ([condition("Created", T0), condition("Running")], JobState.RUNNING),
    ([condition("Created", T0), condition("Restarting")], JobState.RESTARTING),
    ([condition("Created", T0), condition("Suspended")], JobState.PENDING),
    ([condition("Created", T0), condition("Running", T0, "False"), condition("Succeeded")], JobState.SUCCEEDED),
    ([condition("Created", T0), condition("Failed", reason="MPIJobFailed", message="launcher exit 1")], JobState.FAILED),
    ([condition("Created", T0), condition("Failed", reason="MPIJobEvicted", message="pod was evicted")],
     JobState.PREEMPTED),
]
VOLCANO_CASES = [
    ("Pending", JobState.PENDING), ("Running", JobState.RUNNING), ("Restarting", JobState.RESTARTING),
    ("Completing", JobState.RUNNING), ("Completed", JobState.SUCCEEDED), ("Aborting", JobState.FAILED),
    ("Aborted", JobState.FAILED), ("Terminating", JobState.FAILED), ("Terminated", JobState.FAILED),
    ("Failed", JobState.FAILED),
]
INDEXED_CASES = [
    ({}, JobState.PENDING),
    ({"active": 2}, JobState.RUNNING),
    ({"conditions": [condition("Complete")], "succeeded": 2}, JobState.SUCCEEDED),
    ({"conditions": [condition("Failed", reason="BackoffLimitExceeded")]}, JobState.FAILED),
    ({"conditions": [condition("Failed", reason="DisruptionTarget", message="evicted by the scheduler")]},
     JobState.PREEMPTED),
    ({"conditions": [condition("Suspended", reason="JobSuspended")]}, JobState.PENDING),
]


def submitted(kind: str, framework: str, kube_cluster, namespace: str):
    jobs = get_backend(kind, api_client=kube_cluster.api_client(), namespace=namespace)
    spec = TrainingJobSpec(framework=framework, command=["python", "t.py"], num_workers=2, image="img:1")
    jobs.submit(IDENTITY.name, spec, IDENTITY.labels())
    return jobs, resource_path(jobs.api_version, jobs.kind, namespace, IDENTITY.name)


@pytest.mark.parametrize("conditions,expected", MPIJOB_CASES)
def test_mpijob_conditions(conditions, expected, kube_cluster, namespace):
    jobs, path = submitted("mpijob", "horovod", kube_cluster, namespace)
    if conditions:
        kube_cluster.patch_status(path, {"conditions": conditions})
    assert jobs.status(IDENTITY.name).state is expected


@pytest.mark.parametrize("phase,expected", VOLCANO_CASES)
def test_volcano_phases(phase, expected, kube_cluster, namespace):
    jobs, path = submitted("volcano", "horovod", kube_cluster, namespace)
    kube_cluster.patch_status(path, {"state": {"phase": phase}})
    status = jobs.status(IDENTITY.name)
    assert status.state is expected
    if phase in ("Aborted", "Terminated"):
        assert phase in status.message, "the user is told the job was stopped, not that it failed by itself"


@pytest.mark.parametrize("status,expected", INDEXED_CASES)
def test_indexed_job_conditions(status, expected, kube_cluster, namespace):
    jobs, path = submitted("indexed-job", "lightgbm", kube_cluster, namespace)
    if status:
        kube_cluster.patch_status(path, status)
    assert jobs.status(IDENTITY.name).state is expected


def _volcano_pod_group(namespace: str, name: str, owner: dict, conditions: list[dict]) -> dict:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace,
                     "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                          "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                          "controller": True}]},
        "spec": {"minMember": 3},
        # PodGroups have no /status subresource: the scheduler writes status with the object
        "status": {"phase": "Pending", "conditions": conditions},
    }


UNSCHEDULABLE = {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources", "message": REASON,
                 "lastTransitionTime": T1}


@pytest.mark.parametrize("kind", ["mpijob", "volcano"])
def test_an_unschedulable_gang_is_gang_pending_with_the_schedulers_reason(kind, kube_cluster, namespace):
    """The PodGroup is found by the name its controller gives it: the MPI operator's is the job's name,
    Volcano's ``<job>-<uid>``; another job's PodGroup is never taken for this one's."""
    jobs = get_backend(kind, api_client=kube_cluster.api_client(), namespace=namespace, gang_scheduler="volcano")
    spec = TrainingJobSpec(framework="horovod", command=["python", "t.py"], num_workers=2, image="img:1")
    jobs.submit(IDENTITY.name, spec, IDENTITY.labels())
    owner = jobs.get(jobs.kind, IDENTITY.name)
    group_path = resource_path("scheduling.volcano.sh/v1beta1", "PodGroup", namespace)
    kube_cluster.request("POST", group_path, _volcano_pod_group(namespace, "someone-else", owner, [UNSCHEDULABLE]))
    assert jobs.status(IDENTITY.name).state is JobState.PENDING

    name = IDENTITY.name if kind == "mpijob" else f"{IDENTITY.name}-{owner['metadata']['uid']}"
    kube_cluster.request("POST", group_path, _volcano_pod_group(namespace, name, owner, [UNSCHEDULABLE]))
    status = jobs.status(IDENTITY.name)
    assert status.state is JobState.GANG_PENDING and status.message == REASON

    later = {"type": "Scheduled", "status": "True", "reason": "tasks in gang are ready to be scheduled",
             "lastTransitionTime": "2026-11-21T00:02:00Z"}
    kube_cluster.request("PUT", f"{group_path}/{name}", {
        **kube_cluster.request("GET", f"{group_path}/{name}"),
        "status": {"phase": "Inqueue", "conditions": [UNSCHEDULABLE, later]}})
    assert jobs.status(IDENTITY.name).state is JobState.PENDING, "only the latest condition counts"


def test_a_job_that_asks_for_no_gang_is_never_gang_pending(kube_cluster, namespace):
    jobs = get_backend("volcano", api_client=kube_cluster.api_client(), namespace=namespace)
    spec = TrainingJobSpec(framework="horovod", command=["python", "t.py"], num_workers=2, image="img:1",
                           scheduling={"gang": False})
    jobs.submit(IDENTITY.name, spec, IDENTITY.labels())
    owner = jobs.get(jobs.kind, IDENTITY.name)
    kube_cluster.request("POST", resource_path("scheduling.volcano.sh/v1beta1", "PodGroup", namespace),
                         _volcano_pod_group(namespace, f"{IDENTITY.name}-{owner['metadata']['uid']}", owner,
                                            [UNSCHEDULABLE]))
    assert owner["spec"]["minAvailable"] == 1
    assert jobs.status(IDENTITY.name).state is JobState.PENDING
