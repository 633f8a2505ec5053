"""How a Kueue Workload's conditions shape a job's status (jobs.backends.kubernetes.status.workload_status)."""

from __future__ import annotations

import pytest

from airflow_ml_provider.jobs.backends.kubernetes.kueue import (
    label_value,
    queueing,
    workload_owner,
)
from airflow_ml_provider.jobs.backends.kubernetes.status import workload_status
from airflow_ml_provider.jobs.state import REQUEUED, JobState, JobStatus

PENDING, RUNNING = JobStatus(JobState.PENDING, "waiting for the MPI operator"), JobStatus(JobState.RUNNING, "r")
QUOTA = "couldn't assign flavors to pod set worker: insufficient quota for nvidia.com/gpu in flavor spot"


def _workload(*conditions: tuple[str, bool, str, str]) -> dict:
    return {"metadata": {"name": "mpijob-a-1"}, "spec": {"queueName": "team-a"}, "status": {"conditions": [
        {"type": kind, "status": str(true), "reason": reason, "message": message}
        for kind, true, reason, message in conditions]}}


def test_waiting_admitted_evicted_and_finished():
    assert workload_status(None, PENDING) == JobStatus(JobState.QUEUED, "waiting for Kueue to create the job's Workload")
    assert workload_status(_workload(), PENDING) == JobStatus(
        JobState.QUEUED, "waiting for admission by Kueue (LocalQueue team-a)")
    assert workload_status(_workload(("QuotaReserved", False, "Pending", QUOTA)), PENDING) == JobStatus(
        JobState.QUEUED, f"Pending: {QUOTA}")
    admitted = _workload(("QuotaReserved", True, "QuotaReserved", ""), ("Admitted", True, "Admitted", ""))
    assert workload_status(admitted, PENDING) == JobStatus(JobState.PENDING, "admitted by Kueue; waiting for its pods")
    assert workload_status(admitted, RUNNING) is RUNNING
    evicted = _workload(("Evicted", True, "Preempted", "for a higher priority"), ("Admitted", False, "x", ""),
                        ("QuotaReserved", False, "Pending", QUOTA))
    assert workload_status(evicted, RUNNING) == JobStatus(
        JobState.PREEMPTED, f"evicted by Kueue (Preempted: for a higher priority); requeued, waiting: Pending: {QUOTA}",
        reason=REQUEUED)
    readmitted = _workload(("Evicted", False, "QuotaReserved", ""), ("Admitted", True, "Admitted", ""))
    assert workload_status(readmitted, RUNNING) is RUNNING
    done = JobStatus(JobState.SUCCEEDED)
    assert workload_status(evicted, done) is done and workload_status(None, done) is done


def test_only_the_controlling_owner_files_a_workload():
    workload = {"metadata": {"ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "x"},
        {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "job-a", "controller": True}]}}
    assert workload_owner(workload) == "kubeflow.org/MPIJob/job-a"
    assert workload_owner({"metadata": {}}) is None


@pytest.mark.parametrize("value", ["team a", "-q", "q-", "a" * 64, "q\n", "q/b"])
def test_label_values_are_refused_naming_the_field(value):
    with pytest.raises(ValueError, match="^scheduling.queue: .* is not a Kubernetes label value"):
        label_value("scheduling.queue", value)


def test_the_queueing_extra_is_checked():
    assert queueing(None) is None and queueing("") is None and queueing("kueue") == "kueue"
    with pytest.raises(ValueError, match="^queueing: 'Kueue' is not a queueing system"):
        queueing("Kueue")
