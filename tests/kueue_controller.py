"""What Kueue does to a job it manages once the job's Workload is admitted, for the tests that run the job's pods
(tests/integration/images/): it unsuspends the job and merges each PodSet's info (the assigned flavor's node
selector; none here unless given) into the job's pod templates.

Taken from kubernetes-sigs/kueue v0.19.2 (8eab68778fc1b52affe165fdf5af29d1e9b4f3cb): jobframework/reconciler.go
:1480-1510 ``startJob`` calls the integration's ``RunWithPodSetsInfo``; ``podset.Merge`` (pkg/podset/podset.go
:181-211) merges a PodSetInfo's annotations, labels, node selector, tolerations and scheduling gates into a pod
template. Until then the job stays suspended, and its controller makes no pod of it (tests/mpi_operator.py,
tests/job_controller.py, tests/trainer_controller.py).
"""

from __future__ import annotations

import copy

RUNTIME_PATCH_MANAGER = "kueue.x-k8s.io/manager"  # pkg/controller/jobs/trainjob/trainjob_controller.go:76


def _merge(template: dict, node_selector: dict[str, str] | None) -> None:
    """podset.Merge (podset.go:181-211), for the node selector a flavor assigns."""
    if node_selector:
        template["spec"].setdefault("nodeSelector", {}).update(node_selector)


def admit_mpijob(mpijob: dict, node_selector: dict[str, str] | None = None) -> dict:
    """jobs/mpijob/mpijob_controller.go:135-155: ``runPolicy.suspend`` false, each replica's template merged."""
    job = copy.deepcopy(mpijob)
    job["spec"]["runPolicy"]["suspend"] = False
    for replica in job["spec"]["mpiReplicaSpecs"].values():
        _merge(replica["template"], node_selector)
    return job


def admit_job(batch_job: dict, node_selector: dict[str, str] | None = None) -> dict:
    """jobs/job/job_controller.go:377-392 (a batch/v1 Job): ``spec.suspend`` false, its template merged (without
    the partial-admission annotation, parallelism stays)."""
    job = copy.deepcopy(batch_job)
    job["spec"]["suspend"] = False
    _merge(job["spec"]["template"], node_selector)
    return job


def webhook_default_trainjob(trainjob: dict) -> dict:
    """Kueue's TrainJob webhook at creation (jobs/trainjob/trainjob_webhook.go:70-103): the job of a queue is
    suspended and gets a runtime patch of Kueue's own, empty until admission."""
    job = copy.deepcopy(trainjob)
    job["spec"]["suspend"] = True
    job["spec"].setdefault("runtimePatches", []).append(
        {"manager": RUNTIME_PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {}}}})
    return job


def admit_trainjob(trainjob: dict, node_selector: dict[str, str] | None = None,
                   replicated_jobs: tuple[str, ...] = ("node",)) -> dict:
    """jobs/trainjob/trainjob_controller.go:243-290: Kueue's runtime patch names every replicated Job of the
    child JobSet with its PodSet's node selector (and labels, annotations, tolerations, scheduling gates), then
    ``spec.suspend`` false; Trainer merges the patch into the JobSet like any other (tests/trainer_controller.py)."""
    job = copy.deepcopy(trainjob)
    (patch,) = [p for p in job["spec"]["runtimePatches"] if p["manager"] == RUNTIME_PATCH_MANAGER]
    pod_spec = {"nodeSelector": dict(node_selector)} if node_selector else {}
    patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"] = [
        {"name": name, "template": {"spec": {"template": {"spec": pod_spec}}}} for name in replicated_jobs]
    job["spec"]["suspend"] = False
    return job
