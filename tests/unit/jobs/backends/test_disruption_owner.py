"""Which pods are the job's (jobs.backends.kubernetes.disruption.owned_by), so that a pod of an earlier job of
the same name, not yet removed by the garbage collector, never preempts this one (what a disrupted pod does
to the job's status is status.compose's: tests/unit/jobs/backends/test_status_core.py). The API-server tests
are in tests/integration/kubernetes/test_disruption.py."""

from __future__ import annotations

import pytest

from airflow_ml_provider.jobs.backends.kubernetes.disruption import owned_by
from airflow_ml_provider.labels import JOB_NAME, PREEMPTIONS, TRY_NUMBER

LABELS = {JOB_NAME: "aml-train-x", TRY_NUMBER: "1", PREEMPTIONS: "1"}
TRAINJOB = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {
    "name": "aml-train-x", "uid": "tj-2", "creationTimestamp": "2026-11-26T10:00:05Z",
    "labels": {**LABELS, "kueue.x-k8s.io/queue-name": "team-a"}}}
MPIJOB = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {
    "name": "aml-train-x", "uid": "mpi-2", "creationTimestamp": "2026-11-26T10:00:05Z", "labels": LABELS}}


def _pod(owner: tuple[str, str, str], created: str = "2026-11-26T10:00:05Z", **labels: str) -> dict:
    api_version, kind, uid = owner
    return {"metadata": {"name": "p", "creationTimestamp": created, "labels": {**LABELS, "role": "worker", **labels},
                         "ownerReferences": [{"apiVersion": api_version, "kind": kind, "uid": uid}]}}


JOBSET_JOB = ("batch/v1", "Job", "job-of-jobset")


@pytest.mark.parametrize("pod,owned", [
    (_pod(JOBSET_JOB), True),  # made in the job's second, with its labels
    (_pod(JOBSET_JOB, "2026-11-26T10:07:00Z"), True),
    (_pod(JOBSET_JOB, "2026-11-26T10:00:04Z"), False),  # made before the job: an earlier job's
    (_pod(JOBSET_JOB, **{PREEMPTIONS: "0"}), False),  # the attempt before
    (_pod(JOBSET_JOB, **{TRY_NUMBER: "2"}), False),
])
def test_a_trainjobs_pods_are_its_own_by_labels_and_creation(pod, owned):
    assert owned_by(pod, TRAINJOB) is owned


def test_a_pod_made_directly_by_the_job_is_its_own_by_uid_alone():
    assert owned_by(_pod(("kubeflow.org/v2beta1", "MPIJob", "mpi-2"), "2026-11-26T09:00:00Z"), MPIJOB)
    # the earlier MPIJob of that name made it, even though its labels and time would fit
    assert not owned_by(_pod(("kubeflow.org/v2beta1", "MPIJob", "mpi-1")), MPIJOB)
    assert not owned_by(_pod(("kubeflow.org/v2beta1", "MPIJob", "mpi-2")), None)
