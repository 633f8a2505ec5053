"""The trainjob backend (Kubeflow Trainer v2) against a real kube-apiserver with Trainer's and JobSet's real
CRDs: the TrainJob is accepted and keeps every field, the JobSet Trainer makes of it (played by
tests/trainer_controller.py) is accepted too, and the job's states come from its conditions and its
JobSet's counts, followed through the shared watch. Its pods run as containers of the training image in
tests/integration/images/test_indexed_job_runs.py."""

from __future__ import annotations

import asyncio

import pytest
from kube_cluster import resource_path
from kueue_controller import admit_trainjob, webhook_default_trainjob
from test_backends import KUBERNETES as BACKEND_OPTIONS  # the same pod options, rendered the same way
from trainer_controller import COMPLETION_INDEX_FIELD, jobset_for

from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.base import JobSubmissionError
from airflow_ml_provider.jobs.backends.kubernetes.watch import CollectionWatcher
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState

pytestmark = pytest.mark.integration

IDENTITY = JobIdentity("pipeline", "train", "manual__2026-11-21T00:00:00+00:00")
SPEC = {"framework": "pytorch", "command": ["python", "-m", "train", "--lr", "0.1"], "num_workers": 3,
        "image": "registry.example/train:1"}
# The other backends' pod options, but the restart count (a TrainJob's is its runtime's).
KUBERNETES = {key: value for key, value in BACKEND_OPTIONS.items() if key != "backoff_limit"}


def condition(kind: str, reason: str, message: str = "jobs completed") -> dict:
    """A true status condition (metav1.Condition: reason, message and lastTransitionTime required)."""
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastTransitionTime": "2026-11-21T00:01:00Z"}


def spec(**overrides) -> TrainingJobSpec:
    return TrainingJobSpec(**{**SPEC, **overrides})


def test_the_trainjob_and_trainers_jobset_are_accepted_and_keep_every_field(trainer_cluster, namespace):
    jobs = get_backend("trainjob", api_client=trainer_cluster.api_client(), namespace=namespace)
    name = IDENTITY.name
    full = spec(nproc_per_node=2, resources={"cpu": 4, "memory": "16Gi", "gpu": 2, "gpu_type": "NVIDIA-A100"},
                env={"EPOCHS": "3"}, timeout_s=1800, kubernetes=KUBERNETES)
    assert jobs.submit(name, full, IDENTITY.labels()) is True
    stored = jobs.get("TrainJob", name)
    body = stored["spec"]
    assert stored["metadata"]["labels"] == IDENTITY.labels()
    assert body["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                  "name": "airflow-ml-torch"}  # deploy/kubernetes/trainingruntime.yaml
    assert body["activeDeadlineSeconds"] == 1800
    trainer = body["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"], trainer["image"]) == (3, 2, "registry.example/train:1")
    assert trainer["command"][0] == "torchrun" and trainer["command"][-5:] == SPEC["command"]
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "2"
    assert {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}} in trainer["env"]

    jobset = jobset_for(stored)  # what Trainer's controller creates from it, accepted by JobSet's CRD
    trainer_cluster.request("POST", resource_path("jobset.x-k8s.io/v1alpha2", "JobSet", namespace), jobset)
    made = trainer_cluster.request("GET", resource_path("jobset.x-k8s.io/v1alpha2", "JobSet", namespace, name))
    (job,) = made["spec"]["replicatedJobs"]
    assert job["template"]["spec"]["parallelism"] == job["template"]["spec"]["completions"] == 3
    pod = job["template"]["spec"]["template"]
    assert pod["metadata"]["labels"]["ml.airflow.apache.org/job-name"] == name, "the log reader's selector"
    assert pod["spec"]["nodeSelector"] == {"pool": "gpu", "nvidia.com/gpu.product": "NVIDIA-A100"}
    assert pod["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry"}] and pod["spec"]["serviceAccountName"] == "trainer"
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "datasets", "readOnly": True}
    (node,) = pod["spec"]["containers"]
    assert node["volumeMounts"] == [{"name": "data", "mountPath": "/data", "readOnly": True}]
    # Pod Security Standard baseline through the runtime patch, kept by both CRDs; the runtime's restarts
    assert pod["spec"]["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert node["securityContext"] == {"allowPrivilegeEscalation": False}
    assert pod["spec"]["restartPolicy"] == "Never" and job["template"]["spec"]["backoffLimit"] == 0
    env = {var["name"]: var for var in node["env"]}
    assert env["PET_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == COMPLETION_INDEX_FIELD
    assert env["PET_MASTER_ADDR"]["value"] == f"{name}-node-0-0.{name}" and env["EPOCHS"]["value"] == "3"


@pytest.mark.parametrize("runtime", [None, "xgboost-distributed"])
def test_an_xgboost_trainjob_and_its_jobset_are_accepted_on_trainers_xgboost_runtime(runtime, trainer_cluster,
                                                                                     namespace):
    """Issue 42: the XGBoost TrainJob names the provider's airflow-ml-xgboost (or Trainer's stock
    xgboost-distributed, both installed from deploy/kubernetes/ and the pinned file); both CRDs keep every field,
    and the JobSet's node container carries Trainer's DMLC_* (tests/trainer_controller.py, xgboost.go:115-144)."""
    jobs = get_backend("trainjob", api_client=trainer_cluster.api_client(), namespace=namespace,
                       **({"training_runtime": runtime} if runtime else {}))
    name = IDENTITY.name
    full = spec(framework="xgboost", command=["python", "/opt/train.py", "--rounds", "5"],
                resources={"cpu": 2, "memory": "4Gi", "gpu": 1}, env={"ROUNDS": "5"}, kubernetes=KUBERNETES)
    assert jobs.submit(name, full, IDENTITY.labels()) is True
    stored = jobs.get("TrainJob", name)
    assert stored["spec"]["runtimeRef"]["name"] == (runtime or "airflow-ml-xgboost")
    trainer = stored["spec"]["trainer"]
    assert trainer["command"] == ["python", "-m", "airflow_ml_provider.runtime.xgboost_tracker", "worker",
                                  "--serve-workers", "3", "--", "python", "/opt/train.py", "--rounds", "5"]
    assert trainer["numNodes"] == 3 and "numProcPerNode" not in trainer
    jobset = jobset_for(stored)
    trainer_cluster.request("POST", resource_path("jobset.x-k8s.io/v1alpha2", "JobSet", namespace), jobset)
    made = trainer_cluster.request("GET", resource_path("jobset.x-k8s.io/v1alpha2", "JobSet", namespace, name))
    (job,) = made["spec"]["replicatedJobs"]
    pod = job["template"]["spec"]["template"]
    (node,) = pod["spec"]["containers"]
    env = {var["name"]: var for var in node["env"]}
    assert env["DMLC_TRACKER_URI"]["value"] == f"{name}-node-0-0.{name}" and env["DMLC_NUM_WORKER"]["value"] == "3"
    assert env["DMLC_TASK_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == COMPLETION_INDEX_FIELD
    assert env["ROUNDS"]["value"] == "5" and node["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["metadata"]["labels"]["ml.airflow.apache.org/job-name"] == name
    restarts = (pod["spec"]["restartPolicy"], job["template"]["spec"].get("backoffLimit"))
    assert restarts == (("Never", 0) if runtime is None else ("OnFailure", None))  # the stock one's: F6


def test_a_kueue_trainjob_kueues_runtime_patch_and_the_suspended_jobset_are_accepted(trainer_cluster, namespace):
    """queueing kueue: the TrainJob is created suspended with its LocalQueue label; Kueue's webhook patch and its
    admission's node selector (tests/kueue_controller.py, Kueue v0.19.2) are kept by the TrainJob CRD, and Trainer's
    JobSet of the job, suspended before admission and with the node selector after, by JobSet's."""
    jobs = get_backend("trainjob", api_client=trainer_cluster.api_client(), namespace=namespace, queueing="kueue")
    name = IDENTITY.name
    assert jobs.submit(name, spec(framework="xgboost", scheduling={"queue": "team-a"}), IDENTITY.labels()) is True
    stored = jobs.get("TrainJob", name)
    assert stored["spec"]["suspend"] is True and stored["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    path = resource_path("trainer.kubeflow.org/v1alpha1", "TrainJob", namespace, name)
    queued = trainer_cluster.request("PUT", path, webhook_default_trainjob(stored))
    jobsets = resource_path("jobset.x-k8s.io/v1alpha2", "JobSet", namespace)
    suspended = trainer_cluster.request("POST", jobsets, jobset_for(queued))
    assert suspended["spec"]["suspend"] is True
    assert suspended["spec"]["replicatedJobs"][0]["template"]["spec"]["suspend"] is True
    trainer_cluster.request("DELETE", f"{jobsets}/{name}")
    admitted = trainer_cluster.request("PUT", path, admit_trainjob(queued, node_selector={"pool": "spot"}))
    assert admitted["spec"]["suspend"] is False
    (patch,) = [p for p in admitted["spec"]["runtimePatches"] if p["manager"] == "kueue.x-k8s.io/manager"]
    (replicated,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert replicated["template"]["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "spot"}
    running = trainer_cluster.request("POST", jobsets, jobset_for(admitted))
    (job,) = running["spec"]["replicatedJobs"]
    assert job["template"]["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "spot"}
    assert not running["spec"].get("suspend") and not job["template"]["spec"].get("suspend")


@pytest.mark.parametrize("overrides,field", [
    ({"kubernetes": {"backoff_limit": 2}}, "kubernetes.backoff_limit"),
    ({"scheduling": {"priority_class": "high"}}, "scheduling.priority_class"),
    ({"scheduling": {"queue": "research"}}, "scheduling.queue"),
    ({"working_dir": "/work"}, "working_dir"),
    ({"env": {"PET_NODE_RANK": "0"}}, "env.PET_NODE_RANK"),
    ({"min_workers": 2}, "min_workers/max_workers"),
    ({"framework": "horovod", "nproc_per_node": 1}, "framework"),
])
def test_what_a_trainjob_has_no_place_for_is_refused_naming_the_field(overrides, field, trainer_cluster, namespace):
    jobs = get_backend("trainjob", api_client=trainer_cluster.api_client(), namespace=namespace)
    with pytest.raises(JobSubmissionError, match=f"^{field}: "):
        jobs.submit("refused", spec(**overrides), {})


def test_a_namespaced_runtime_from_the_connection(trainer_cluster, namespace, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT", '{"conn_type": "ml_training", "extra": {'
                       '"training_runtime": "torch-cpu", "training_runtime_kind": "TrainingRuntime"}}')
    jobs = TrainingBackendHook().get_backend("trainjob")
    jobs.submit(IDENTITY.name, spec(), {})
    assert jobs.get("TrainJob", IDENTITY.name)["spec"]["runtimeRef"]["kind"] == "TrainingRuntime"
    assert jobs.get("TrainJob", IDENTITY.name)["spec"]["runtimeRef"]["name"] == "torch-cpu"


def _counts(**fields) -> dict:
    """Trainer's copy of the JobSet's replicated-job counts (every count is required by the CRD)."""
    return {"jobsStatus": [{"name": "node", **{k: fields.get(k, 0)
                                               for k in ("ready", "succeeded", "failed", "active", "suspended")}}]}


TRAINJOB_CASES = [
    ({}, JobState.PENDING),
    (_counts(active=1), JobState.PENDING),
    (_counts(active=1, ready=1), JobState.RUNNING),
    ({"conditions": [condition("Suspended", reason="Suspended", message="TrainJob is suspended")]}, JobState.PENDING),
    ({"conditions": [condition("Complete", reason="AllJobsCompleted")], **_counts(succeeded=1)}, JobState.SUCCEEDED),
    ({"conditions": [condition("Failed", reason="FailedJobs", message="jobset failed: node-0 exit 1")]},
     JobState.FAILED),
    ({"conditions": [condition("Failed", reason="FailedJobs", message="pod evicted by the node")]},
     JobState.PREEMPTED),
    ({"conditions": [condition("Failed", reason="DeadlineExceeded", message="activeDeadlineSeconds passed")]},
     JobState.FAILED),
]


@pytest.mark.parametrize("status,expected", TRAINJOB_CASES)
def test_trainjob_states_from_its_conditions_and_its_jobsets_counts(status, expected, trainer_cluster, namespace):
    jobs = get_backend("trainjob", api_client=trainer_cluster.api_client(), namespace=namespace)
    jobs.submit(IDENTITY.name, spec(), IDENTITY.labels())
    if status:
        trainer_cluster.patch_status(resource_path(jobs.api_version, "TrainJob", namespace, IDENTITY.name), status)
    assert jobs.status(IDENTITY.name).state is expected


def test_trainjobs_are_followed_through_the_shared_watch(trainer_cluster, namespace):
    """Trainer's progress (pods starting, ready, the JobSet completed) reaches a follower as it is written:
    one list and one watch of TrainJobs, no per-job polling."""
    CollectionWatcher._shared.clear()
    jobs = TrainingBackendHook().get_backend("trainjob")
    jobs.submit(IDENTITY.name, spec(), IDENTITY.labels())
    path = resource_path(jobs.api_version, "TrainJob", namespace, IDENTITY.name)

    def play_trainer() -> None:
        trainer_cluster.patch_status(path, _counts(active=1))
        trainer_cluster.patch_status(path, _counts(active=1, ready=1))
        trainer_cluster.patch_status(path, {"conditions": [condition("Complete", reason="AllJobsCompleted")],
                                            **_counts(succeeded=1)})

    async def follow() -> tuple[list[JobState], dict[str, int]]:
        states = []
        async for status in jobs.statuses(IDENTITY.name, 30):
            states.append(status.state)
            if len(states) == 1:
                await asyncio.to_thread(play_trainer)
            if status.state.is_terminal:
                watchers = CollectionWatcher._shared.values()
                return states, {w.path.rsplit("/", 1)[-1]: w.requests for w in watchers}

    states, requests = asyncio.run(asyncio.wait_for(follow(), 60))
    assert states[0] is JobState.PENDING and states[-2:] == [JobState.RUNNING, JobState.SUCCEEDED], states
    assert requests["trainjobs"] == 2, requests


def test_with_kueue_the_trainjob_is_created_suspended_with_its_queue(trainer_cluster, namespace):
    """Kueue's TrainJob integration admits it by ``spec.suspend``; queue and priority travel as Kueue's labels."""
    jobs = get_backend("trainjob", api_client=trainer_cluster.api_client(), namespace=namespace, queueing="kueue")
    jobs.submit(IDENTITY.name, spec(scheduling={"queue": "team-a", "priority_class": "high"}), IDENTITY.labels())
    stored = jobs.get("TrainJob", IDENTITY.name)
    assert stored["spec"]["suspend"] is True
    assert stored["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert stored["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
