"""Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1): a TrainJob naming a (Cluster)TrainingRuntime.

Trainer's controller builds a JobSet from the runtime's template and the TrainJob's ``trainer`` fields
(image, command, env, nodes, processes and resources per node). Its torch plugin numbers the nodes
(kubeflow/trainer v2.3.0, pkg/runtime/framework/plugins/torch/torch.go ``EnforceMLPolicy``): every
trainer container gets PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK (the pod's completion index, by
the downward API), PET_MASTER_ADDR (``<job>-node-0-0.<job>``: pod 0 of the JobSet's ``node`` Job) and
PET_MASTER_PORT (29500), which torchrun reads as its static rendezvous: the command names none of them.
Its xgboost plugin (pkg/runtime/framework/plugins/xgboost/xgboost.go:115-144) likewise gives every node
DMLC_TRACKER_URI (``<job>-node-0-0.<job>``), DMLC_TRACKER_PORT (29500), DMLC_TASK_ID (the completion index) and
DMLC_NUM_WORKER (nodes, times the GPUs of a node: :100-113), and leaves the tracker to the user's code on node
0: here the gate (``jobs.xgboost.pod_gate``) serves it there and every worker's command runs unchanged.
Pod-level options (node selector, tolerations, volumes, service account, pull secrets, the pod's and the
node container's securityContext, and the labels the log reader and the pod watch select by) go in a runtime
patch of the provider's own.

Restarts are the runtime's: a runtime patch has no place for a pod's restartPolicy or a Job's backoffLimit
(kubeflow/trainer v2.3.0 pkg/apis/trainer/v1alpha1/trainjob_types.go:370-375, JobSpecPatch: only the pod
template; :389-463, PodSpecPatch: no restartPolicy), nor has the TrainJob's ``trainer`` (:247-289). Trainer's
stock ``torch-distributed`` (manifests/base/runtimes/torch_distributed.yaml) sets neither: JobSet's webhook
defaults the pods to OnFailure (kubernetes-sigs/jobset v0.12.0 pkg/webhooks/jobset_webhook.go:124-127) and
the API server the Job's backoffLimit to 6 (its schema: "Defaults to 6", the runtime CRD
trainer.kubeflow.org_clustertrainingruntimes.yaml:522-526), so a crashing rank restarted in place six times.
The provider's runtimes, ``airflow-ml-torch`` (deploy/kubernetes/trainingruntime.yaml, the default for PyTorch)
and ``airflow-ml-xgboost`` (deploy/kubernetes/trainingruntime-xgboost.yaml, for XGBoost: Trainer's stock
``xgboost-distributed``, pinned in requirements/crds.lock, with the same two fields), are the stock runtimes
with ``restartPolicy: Never`` and ``backoffLimit: 0``: a rank that exits non-zero fails its
Job, which fails the JobSet (no failurePolicy: executeFailurePolicy, pkg/controllers/failure_policy.go:52-61)
and so the TrainJob, as docs/pytorch.md says; a preempted one is resubmitted by the provider.

States come from the TrainJob alone: its conditions (Complete, Failed, Suspended; Trainer copies the
first two from its JobSet's) and ``status.jobsStatus`` (Trainer's copy of the JobSet's replicated-job
counts), so one shared watch of TrainJobs follows every job. Its disrupted pods (from the shared pod
watch, as on every backend) are owned by JobSet's Jobs, not by the TrainJob: ``disruption.owned_by`` ties
them to it by its labels and creation time.
"""

from __future__ import annotations

from airflow_ml_provider.jobs import torchrun, xgboost
from airflow_ml_provider.jobs.backends.kubernetes.base import KubernetesBackend
from airflow_ml_provider.jobs.backends.kubernetes.pod_template import (
    check_pod_security,
    container,
    deadline_s,
    metadata,
    pod_template,
    refuse_unused,
)
from airflow_ml_provider.jobs.backends.kubernetes.rest import dns_subdomain
from airflow_ml_provider.jobs.backends.kubernetes.status import ended, said
from airflow_ml_provider.jobs.spec import Framework, TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState, JobStatus

API_GROUP = "trainer.kubeflow.org"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
NODE = "node"  # the runtime's trainer Job and container (Trainer's constants.Node)
# deploy/kubernetes/trainingruntime.yaml and trainingruntime-xgboost.yaml: restartPolicy Never, backoffLimit 0
DEFAULT_RUNTIMES = {Framework.PYTORCH: "airflow-ml-torch", Framework.XGBOOST: "airflow-ml-xgboost"}
PATCH_MANAGER = "ml.airflow.apache.org/airflow-ml-provider"  # who owns the runtime patch (required by the CRD)
# Set by Trainer's torch and xgboost plugins: its admission webhook refuses a TrainJob whose env sets one
# (pkg/constants/constants.go:299-303, TorchRunReservedEnvNames, XGBoostReservedEnvNames; xgboost.go:53-71).
RESERVED_ENV = {
    Framework.PYTORCH: ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"),
    Framework.XGBOOST: ("DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER"),
}


class TrainJobBackend(KubernetesBackend):
    """Args (beyond KubernetesBackend's): ``training_runtime``, the runtime every TrainJob names (default by
    framework, ``DEFAULT_RUNTIMES``: the provider's ``airflow-ml-torch`` and ``airflow-ml-xgboost``,
    deploy/kubernetes/; a runtime of one's own must set ``restartPolicy: Never`` and ``backoffLimit: 0`` on its
    ``node`` Job for a crash to end the job, and have the ML policy of the jobs' framework), and
    ``training_runtime_kind``, ``ClusterTrainingRuntime`` (default) or ``TrainingRuntime`` (one in the job's
    namespace)."""

    name = "trainjob"
    api_version = f"{API_GROUP}/v1alpha1"
    kind = "TrainJob"
    frameworks = frozenset({Framework.PYTORCH, Framework.XGBOOST})
    suspend_field = ("spec", "suspend")  # Kueue's TrainJob integration

    def __init__(self, *args, training_runtime: str | None = None,
                 training_runtime_kind: str = "ClusterTrainingRuntime", **kwargs):
        super().__init__(*args, **kwargs)
        self.training_runtime = training_runtime and dns_subdomain("training_runtime", training_runtime)
        if training_runtime_kind not in RUNTIME_KINDS:
            raise ValueError(f"training_runtime_kind: {training_runtime_kind!r} is not one of {list(RUNTIME_KINDS)}")
        self.training_runtime_kind = training_runtime_kind

    def manifests(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> list[dict]:
        _check_options(spec)
        if spec.framework is Framework.XGBOOST:  # DMLC_* from Trainer's plugin; the gate serves node 0's tracker
            node = container(spec, NODE, xgboost.pod_gate(spec.command, None, spec.num_workers))
            trainer = {"image": node["image"], "command": node["command"], "env": node["env"],
                       "numNodes": spec.num_workers}
        else:
            node = container(spec, NODE, ["torchrun", *torchrun.static_args(spec, {})])
            trainer = {"image": node["image"], "command": node["command"], "env": node["env"],
                       "numNodes": spec.num_workers, "numProcPerNode": spec.nproc_per_node}
        if node["resources"]:
            trainer["resourcesPerNode"] = node["resources"]
        # the node container's patch (trainjob_types.go:465-494, ContainerPatch: env only through the trainer)
        patch = {key: node[key] for key in ("volumeMounts", "securityContext") if node.get(key)}
        pod = pod_template(spec, labels, "worker", [{"name": NODE, **patch}] if patch else [],
                           restart_policy=None)  # the runtime's; a patch cannot set it
        if not pod["spec"]["containers"]:
            del pod["spec"]["containers"]
        job_spec = {
            "runtimeRef": {"apiGroup": API_GROUP, "kind": self.training_runtime_kind,
                           "name": self.training_runtime or DEFAULT_RUNTIMES[spec.framework]},
            "trainer": trainer,
            "runtimePatches": [{"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {
                "replicatedJobs": [{"name": NODE, "template": {"spec": {"template": pod}}}]}}}}],
        }
        if deadline := deadline_s(spec):
            job_spec["activeDeadlineSeconds"] = deadline
        return [{"apiVersion": self.api_version, "kind": self.kind, "metadata": metadata(name, self.namespace, labels),
                 "spec": job_spec}]

    def job_status(self, obj: dict) -> JobStatus:
        status = obj.get("status") or {}
        true = {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}
        for kind, state in (("Failed", JobState.FAILED), ("Complete", JobState.SUCCEEDED)):
            if condition := true.get(kind):
                return ended(state, said(condition, kind))
        if "Suspended" in true:
            return JobStatus(JobState.PENDING, true["Suspended"].get("message") or "suspended")
        jobs = status.get("jobsStatus") or []
        if any(job.get("ready") or job.get("succeeded") for job in jobs):
            return JobStatus(JobState.RUNNING, "the JobSet's pods are ready")
        if any(job.get("active") for job in jobs):
            return JobStatus(JobState.PENDING, "the JobSet's pods are starting")
        return JobStatus(JobState.PENDING, "waiting for Trainer's JobSet")


def _check_options(spec: TrainingJobSpec) -> None:
    """Refuse, naming the field, what a TrainJob has no place for: it sets pods only through the runtime's
    template and a runtime patch, which has no priority class, working directory or restart count."""
    refuse_unused(spec, "trainjob", "clean_pod_policy", "slots_per_worker", "worker_port", "backoff_limit")
    check_pod_security(spec, "trainjob")
    if spec.scheduling.queue or spec.scheduling.priority_class:
        field = "queue" if spec.scheduling.queue else "priority_class"
        raise ValueError(f"scheduling.{field}: a TrainJob takes a queue and priority only through Kueue "
                         "(the connection's queueing: kueue), or from its runtime's template")
    if spec.working_dir:
        raise ValueError("working_dir: a TrainJob cannot set its container's working directory; use the "
                         "runtime's, or absolute paths in the command")
    if reserved := sorted(set(spec.env) & set(RESERVED_ENV[spec.framework])):
        raise ValueError(f"env.{reserved[0]}: Trainer's {spec.framework.value} plugin sets it (it numbers the nodes)")
    if spec.framework is Framework.XGBOOST and spec.resources.gpu > 1:
        # xgboost.go:100-113: DMLC_NUM_WORKER is the nodes times a node's GPUs, one worker a GPU; the provider
        # runs one worker a pod, so the tracker would wait for workers that never come
        raise ValueError(f"resources.gpu: Trainer's xgboost plugin counts a worker per GPU, and a TrainJob's XGBoost "
                         f"node runs one worker (got {spec.resources.gpu}); use 1 GPU a worker, and more workers")
