"""One pure decision of a Kubernetes job's state (jobs.backends.kubernetes.status): per kind, what its object
says, then its gang, Kueue's admission and its pods, table by table. The same function serves the sync
``status`` and the watch-driven ``statuses`` (tests/integration/kubernetes covers both on a real API server)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.kubernetes.disruption import owned_by
from airflow_ml_provider.jobs.backends.kubernetes.indexed_job import IndexedJobBackend
from airflow_ml_provider.jobs.backends.kubernetes.mpijob import MPIJobBackend
from airflow_ml_provider.jobs.backends.kubernetes.status import Surroundings, compose
from airflow_ml_provider.jobs.backends.kubernetes.trainjob import TrainJobBackend
from airflow_ml_provider.jobs.backends.kubernetes.volcano import VolcanoBackend
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import REQUEUED, JobState

P, R, RS, S, F, PE, GP, Q = (JobState.PENDING, JobState.RUNNING, JobState.RESTARTING, JobState.SUCCEEDED,
                             JobState.FAILED, JobState.PREEMPTED, JobState.GANG_PENDING, JobState.QUEUED)
PACKAGE = Path(__file__).resolve().parents[4] / "airflow_ml_provider"


T0 = "2026-12-02T00:00:00Z"


def _true(kind: str, reason: str = "", message: str = "", when: str = "2026-12-02T00:01:00Z") -> dict:
    return {"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": when}


def _obj(status: dict, **spec) -> dict:
    return {"metadata": {"name": "job", "uid": "u1"}, "spec": spec, "status": status}


UNSCHEDULABLE = {"apiVersion": "scheduling.volcano.sh/v1beta1", "metadata": {"name": "job-u1"},
                 "status": {"conditions": [_true("Unschedulable", message="0/4 nodes are available")]}}
PLUGINS_PENDING = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "metadata": {"name": "job"},
                   "spec": {"minMember": 3}, "status": {"phase": "Pending", "running": 1}}
PLACED = {"apiVersion": "scheduling.volcano.sh/v1beta1", "metadata": {"name": "job-u1"},
          "status": {"conditions": [_true("Scheduled")]}}


def _workload(*conditions: dict) -> dict:
    return {"metadata": {"name": "w"}, "spec": {"queueName": "team-a"}, "status": {"conditions": list(conditions)}}


QUOTA = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "insufficient quota"}
EVICTED = _true("Evicted", "Preempted", "preempted by a higher priority workload")
ADMITTED = _true("Admitted")

# (kind, the object's status, expected state, a word the message must hold)
OBJECTS = [
    (MPIJobBackend, {}, P, "MPI operator"),
    (MPIJobBackend, {"conditions": [_true("Created", when=T0)]}, P, ""),
    (MPIJobBackend, {"conditions": [_true("Created", when=T0), _true("Running")]}, R, ""),
    (MPIJobBackend, {"conditions": [_true("Created", when=T0)], "replicaStatuses": {"Launcher": {"active": 1}}},
     R, "launcher runs"),
    (MPIJobBackend, {"conditions": [_true("Created", when=T0), _true("Restarting")]}, RS, ""),
    (MPIJobBackend, {"conditions": [_true("Running", when=T0), _true("Succeeded", "MPIJobSucceeded")]}, S, "Succeeded"),
    (MPIJobBackend, {"conditions": [_true("Failed", "MPIJobFailed", "launcher exit 1")]}, F, "exit 1"),
    (MPIJobBackend, {"conditions": [_true("Failed", "MPIJobEvicted", "pod was evicted")]}, PE, "evicted"),
    (VolcanoBackend, {}, P, "Pending"),
    (VolcanoBackend, {"state": {"phase": "Running"}}, R, ""),
    (VolcanoBackend, {"state": {"phase": "Restarting"}}, RS, ""),
    (VolcanoBackend, {"state": {"phase": "Completed"}}, S, ""),
    (VolcanoBackend, {"state": {"phase": "Aborted", "reason": "PodFailed", "message": "exit 1"}}, F, "Aborted: PodFailed"),
    (VolcanoBackend, {"state": {"phase": "Aborted", "reason": "PodEvicted"}}, PE, "PodEvicted"),
    (VolcanoBackend, {"state": {"phase": "Aborted", "message": "DisruptionTarget: node drained"}}, PE, "drained"),
    (IndexedJobBackend, {}, P, "waiting for pods"),
    (IndexedJobBackend, {"active": 2}, R, "2 pod(s)"),
    (IndexedJobBackend, {"conditions": [_true("Suspended")]}, P, "Suspended"),
    (IndexedJobBackend, {"conditions": [_true("Complete")]}, S, "Complete"),
    (IndexedJobBackend, {"conditions": [_true("Failed", "BackoffLimitExceeded", "has reached the limit")]}, F,
     "BackoffLimitExceeded"),
    (IndexedJobBackend, {"conditions": [_true("Failed", "PodFailurePolicy", "DisruptionTarget on pod job-0")]}, PE,
     "job-0"),
    (TrainJobBackend, {}, P, "Trainer's JobSet"),
    (TrainJobBackend, {"jobsStatus": [{"active": 2}]}, P, "starting"),
    (TrainJobBackend, {"jobsStatus": [{"ready": 2}]}, R, "ready"),
    (TrainJobBackend, {"conditions": [_true("Suspended", message="suspended by Kueue")]}, P, "Kueue"),
    (TrainJobBackend, {"conditions": [_true("Complete", "JobsCompleted")]}, S, "JobsCompleted"),
    (TrainJobBackend, {"conditions": [_true("Failed", "FailedJobs", "node-0 failed")]}, F, "node-0"),
    (TrainJobBackend, {"conditions": [_true("Failed", "FailedJobs", "pod preempted by the scheduler")]}, PE,
     "scheduler"),
]


@pytest.mark.parametrize("backend,status,state,word", OBJECTS,
                         ids=[f"{b.name}-{i}" for i, (b, *_rest) in enumerate(OBJECTS)])
def test_each_kinds_object_decides_its_own_state(backend, status, state, word):
    decided = backend.job_status(backend.__new__(backend), _obj(status))  # pure: no client needed
    assert decided.state is state and word in decided.message, decided


# (what the object says, what surrounds it, expected state, a word the message must hold, expected reason)
PENDING_MPIJOB = (MPIJobBackend, {})
RUNNING_MPIJOB = (MPIJobBackend, {"conditions": [_true("Running")]})
FAILED_VOLCANO = (VolcanoBackend, {"state": {"phase": "Failed", "reason": "PodFailed"}})
SURROUNDED = [
    (PENDING_MPIJOB, Surroundings(gang=UNSCHEDULABLE), GP, "0/4 nodes", ""),
    (PENDING_MPIJOB, Surroundings(gang=PLUGINS_PENDING), GP, "1/3 pods running", ""),
    (PENDING_MPIJOB, Surroundings(gang=PLACED), P, "MPI operator", ""),
    (RUNNING_MPIJOB, Surroundings(gang=UNSCHEDULABLE), R, "", ""),  # a gang is read only while pending
    (PENDING_MPIJOB, Surroundings(queued=True), Q, "create the job's Workload", ""),
    (PENDING_MPIJOB, Surroundings(queued=True, workload=_workload(QUOTA)), Q, "insufficient quota", ""),
    (PENDING_MPIJOB, Surroundings(queued=True, workload=_workload(ADMITTED)), P, "admitted by Kueue", ""),
    (RUNNING_MPIJOB, Surroundings(queued=True, workload=_workload(ADMITTED)), R, "", ""),
    (RUNNING_MPIJOB, Surroundings(queued=True, workload=_workload(EVICTED)), PE, "higher priority", REQUEUED),
    # Kueue's own eviction stands over a lost pod: Kueue requeues the job, nothing is resubmitted
    (RUNNING_MPIJOB, Surroundings(queued=True, workload=_workload(EVICTED), lost="pod job-worker-0 lost its node"),
     PE, "higher priority", REQUEUED),
    (RUNNING_MPIJOB, Surroundings(lost="pod job-worker-0 lost its node n1 (the Node was deleted)"), PE, "n1", ""),
    (PENDING_MPIJOB, Surroundings(gang=UNSCHEDULABLE, lost="pod job-worker-0 is disrupted"), PE, "disrupted", ""),
    (FAILED_VOLCANO, Surroundings(lost="pod job-worker-0 is disrupted"), F, "PodFailed", ""),  # an end stands
    (FAILED_VOLCANO, Surroundings(queued=True, workload=_workload(EVICTED)), F, "PodFailed", ""),
]


@pytest.mark.parametrize("job,around,state,word,reason", SURROUNDED)
def test_gang_kueue_and_pods_compose_in_one_order(job, around, state, word, reason):
    backend, status = job
    decided = compose(backend.job_status(backend.__new__(backend), _obj(status)), around)
    assert (decided.state, decided.reason) == (state, reason) and word in decided.message, decided


def test_the_eviction_words_and_the_refusal_codes_are_written_once():
    """One vocabulary, one classification: a second copy is how the backends came to disagree."""
    sources = {path: path.read_text() for path in PACKAGE.rglob("*.py")}
    words = [path for path, text in sources.items() if re.search(r"\"evict\",\s*\"preempt\"", text)]
    codes = [path for path, text in sources.items() if re.search(r"401,\s*403", text)]
    formats = [path for path, text in sources.items() if "get('reason', '')}: {" in text]
    assert [p.name for p in words] == ["status.py"] and [p.name for p in codes] == ["rest.py"], (words, codes)
    assert formats == [], "a condition's 'reason: message' is status.said's"


GANG = TrainingJobSpec(framework="horovod", command=["python", "t.py"], num_workers=3, image="img:1")
TORCH = TrainingJobSpec(framework="pytorch", command=["python", "t.py"], num_workers=2, image="img:1")


@pytest.mark.parametrize("kind,spec,options", [
    ("mpijob", GANG, {"gang_scheduler": "volcano"}), ("mpijob", GANG, {"gang_scheduler": "scheduler-plugins"}),
    ("mpijob", GANG, {}), ("volcano", GANG, {}), ("indexed-job", TORCH, {}), ("trainjob", TORCH, {}),
])
def test_what_the_watch_keeps_of_a_job_decides_as_the_whole_job_does(kind, spec, options):
    """The shared watch keeps a slim copy of every job of a namespace (``watched``): it must decide the state,
    the gang and the pods' owner exactly as the whole object would, at a fraction of its size."""
    backend = get_backend(kind, api_client=None, namespace="ml", **options)
    whole = backend.manifests("job", spec, {"airflow-ml/try": "1"})[0]
    whole["metadata"].update(uid="u1", creationTimestamp=T0, resourceVersion="7")
    pod = {"metadata": {"name": "job-worker-0", "labels": {"airflow-ml/try": "1"}, "creationTimestamp": T0,
                        "ownerReferences": [{"apiVersion": whole["apiVersion"], "kind": whole["kind"], "uid": "u1"}]}}
    for entry, status, *_rest in OBJECTS:
        if entry is type(backend):
            whole["status"] = status
            slim = backend.watched(whole)
            assert backend.job_status(slim) == backend.job_status(whole)
            assert backend.pod_group(slim) == backend.pod_group(whole)
            assert owned_by(pod, slim) == owned_by(pod, whole) is True
    assert '"containers"' in json.dumps(whole) and '"containers"' not in json.dumps(slim), "no pod template is kept"
