"""What Kubeflow Trainer v2's, JobSet's and the Job controller's reconcilers make of a TrainJob on the
``torch-distributed`` and ``xgboost-distributed`` runtimes (and the provider's versions of them), for tests that
play them (the test cluster runs no controller).

Each step names the upstream code it follows: kubeflow/trainer v2.3.0 (658725bdae5c7e3a0854d93ac6ff492e109a22ab),
kubernetes-sigs/jobset v0.12.0 (f22e565ac3cc3265c7c45ef67ecffdc689af5d77), kubernetes' Job controller.
Only what a TrainJob of this provider uses is played: one trainer Job (``node``), no initializers.
"""

from __future__ import annotations

import copy

import yaml
from kube_cluster import CRDS_DIR

from support import REPO

# manifests/base/runtimes/torch_distributed.yaml, as Trainer's install creates it (Apache-2.0).
TORCH_DISTRIBUTED = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed", "labels": {"trainer.kubeflow.org/framework": "torch"}},
    "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
        "name": "node",
        "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                     "spec": {"template": {"spec": {"containers": [
                         {"name": "node", "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"}]}}}}}]}}},
}
# The provider's runtime (the trainjob backend's default): torch-distributed with restartPolicy Never, backoffLimit 0.
AIRFLOW_ML_TORCH = yaml.safe_load((REPO / "deploy" / "kubernetes" / "trainingruntime.yaml").read_text())
# The provider's XGBoost runtime: xgboost-distributed with restartPolicy Never, backoffLimit 0.
AIRFLOW_ML_XGBOOST = yaml.safe_load((REPO / "deploy" / "kubernetes" / "trainingruntime-xgboost.yaml").read_text())
# manifests/base/runtimes/xgboost_distributed.yaml at v2.3.0, the file requirements/crds.lock pins (`make crds`).
XGBOOST_DISTRIBUTED_FILE = CRDS_DIR / "next" / "runtimes" / "xgboost_distributed.yaml"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # the Job controller's pod annotation
COMPLETION_INDEX_FIELD = f"metadata.annotations['{COMPLETION_INDEX}']"  # Trainer's JobCompletionIndexFieldPath
TRAINER_PORT = 29500  # Trainer's constants.ContainerTrainerPort


def _upsert_env(env: list[dict], extra: list[dict]) -> list[dict]:
    """pkg/apply UpsertEnvVars: a variable of the same name is replaced, a new one appended."""
    names = {var["name"]: i for i, var in enumerate(env)}
    for var in extra:
        if var["name"] in names:
            env[names[var["name"]]] = var
        else:
            env.append(var)
    return env


def _merge_maps(target: dict, patch: dict) -> None:
    """A strategic merge of two structs (a securityContext, a nodeSelector): field by field, nested ones too."""
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge_maps(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _merge_patch(pod: dict, patch: dict) -> None:
    """pkg/runtime/core/trainingruntime.go:251-290 ``mergeRuntimePatches`` (a strategic merge of the pod template
    patch, :272): metadata labels merged, maps and structs merged field by field, lists of named items merged by
    name, the rest replaced."""
    for key, value in (patch.get("metadata") or {}).items():
        pod.setdefault("metadata", {}).setdefault(key, {}).update(value)
    spec = pod.setdefault("spec", {})
    for key, value in (patch.get("spec") or {}).items():
        if key == "containers":
            by_name = {c["name"]: c for c in spec["containers"]}
            for change in value:
                target = by_name[change["name"]]
                for field, items in change.items():
                    if field == "name":
                        continue
                    if isinstance(items, dict):
                        _merge_maps(target.setdefault(field, {}), items)
                    else:
                        target[field] = [*target.get(field, []), *items]
        elif isinstance(value, dict):
            _merge_maps(spec.setdefault(key, {}), value)
        else:
            spec[key] = value


def xgboost_distributed() -> dict:
    """Trainer's stock ``xgboost-distributed``, from the verified pinned file."""
    return yaml.safe_load(XGBOOST_DISTRIBUTED_FILE.read_text())


def runtimes() -> dict[str, dict]:
    """The ClusterTrainingRuntimes the tests install, by name: Trainer's stock ones and the provider's."""
    return {runtime["metadata"]["name"]: runtime
            for runtime in (TORCH_DISTRIBUTED, AIRFLOW_ML_TORCH, xgboost_distributed(), AIRFLOW_ML_XGBOOST)}


def runtime_of(trainjob: dict) -> dict:
    """The ClusterTrainingRuntime the TrainJob names, of those the tests install (``runtimes``)."""
    return runtimes()[trainjob["spec"]["runtimeRef"]["name"]]


def _torch_env(name: str, nodes: int, trainer: dict) -> list[dict]:
    """plugins/torch/torch.go ``EnforceMLPolicy``: the PET_* variables torchrun reads."""
    return [
        {"name": "PET_NNODES", "value": str(nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": str(trainer.get("numProcPerNode", "auto"))},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_FIELD}}},
        {"name": "PET_MASTER_ADDR", "value": f"{name}-node-0-0.{name}"},
        {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)},
    ]


def _gpus(resources: dict) -> int:
    """pkg/runtime/runtime.go:280-298 ``GetNumGPUPerNode``: the first resource named like "gpu", requests first."""
    for field in ("requests", "limits"):
        for resource, quantity in (resources.get(field) or {}).items():
            if "gpu" in resource.lower() and int(quantity):
                return int(quantity)
    return 0


def _xgboost_env(name: str, nodes: int, node: dict) -> list[dict]:
    """plugins/xgboost/xgboost.go ``EnforceMLPolicy`` (:73-149): a worker per node, or per GPU of a node (the
    runtime's resources, else the TrainJob's: :100-113); the tracker at node 0's pod, ``<job>-node-0-0.<job>``
    (:115-117), Trainer's port (:125-128), the task id the completion index (:129-134), DMLC_NUM_WORKER the
    total (:135-138). Nothing starts the tracker: the user's code on rank 0 does."""
    workers = nodes * max(1, _gpus(node.get("resources") or {}))  # the TrainJob's resources replaced the runtime's
    return [
        {"name": "DMLC_TRACKER_URI", "value": f"{name}-node-0-0.{name}"},
        {"name": "DMLC_TRACKER_PORT", "value": str(TRAINER_PORT)},
        {"name": "DMLC_TASK_ID", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_FIELD}}},
        {"name": "DMLC_NUM_WORKER", "value": str(workers)},
    ]


def refused_env(trainjob: dict, runtime: dict | None = None) -> list[str]:
    """The TrainJob env names Trainer's admission webhook refuses on ``runtime``: those its plugin sets
    (xgboost.go:53-71 ``Validate`` with pkg/constants/constants.go:302-303; the torch plugin's likewise, :300)."""
    policy = (runtime or runtime_of(trainjob))["spec"]["mlPolicy"]
    reserved = {"torch": {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"},
                "xgboost": {"DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER"}}
    names = {var["name"] for var in trainjob["spec"]["trainer"].get("env") or []}
    return sorted(names & set().union(*(reserved[key] for key in reserved if key in policy)))


def jobset_for(trainjob: dict, runtime: dict | None = None) -> dict:
    """The JobSet Trainer creates for ``trainjob`` (on ``runtime``, default the one it names): the runtime's
    template with the runtime patches merged (trainingruntime.go ``mergeRuntimePatches``), the trainer Job's
    parallelism and completions set to numNodes (plugins/jobset/jobset.go ``Build``), the ``node`` container's
    image, command, env and resources from the TrainJob's trainer (plugins/jobset/builder.go ``Trainer``;
    trainingruntime.go), then the runtime's ML policy plugin's variables and port (the torch plugin's PET_*,
    plugins/torch/torch.go ``EnforceMLPolicy``; the xgboost plugin's DMLC_*, ``_xgboost_env``); named after the
    TrainJob and owned by it (jobset.go ``Build``); then JobSet's
    webhook's defaults for a pod template without restartPolicy: OnFailure (kubernetes-sigs/jobset v0.12.0
    pkg/webhooks/jobset_webhook.go:124-127). A suspended TrainJob's JobSet is suspended (jobset.go:425), and so is
    the JobSet's Job (JobSet's pkg/controllers/jobset_controller.go:968-970): it has no pod."""
    runtime = runtime or runtime_of(trainjob)
    name, trainer = trainjob["metadata"]["name"], trainjob["spec"]["trainer"]
    spec = copy.deepcopy(runtime["spec"]["template"]["spec"])
    (job,) = spec["replicatedJobs"]
    pod = job["template"]["spec"]["template"]
    for patch in trainjob["spec"].get("runtimePatches") or []:
        for replicated in patch["trainingRuntimeSpec"]["template"]["spec"].get("replicatedJobs") or []:
            if replicated["name"] == job["name"]:
                _merge_patch(pod, replicated["template"]["spec"]["template"])
    nodes = trainer.get("numNodes", runtime["spec"]["mlPolicy"]["numNodes"])
    job["replicas"] = 1
    job["template"]["spec"].update(parallelism=nodes, completions=nodes)
    (node,) = [c for c in pod["spec"]["containers"] if c["name"] == "node"]
    node.update({key: trainer[key] for key in ("image", "command", "args") if key in trainer})
    if "resourcesPerNode" in trainer:
        node["resources"] = trainer["resourcesPerNode"]
    _upsert_env(node.setdefault("env", []), list(trainer.get("env", [])))
    policy = runtime["spec"]["mlPolicy"]
    assert not refused_env(trainjob, runtime), "Trainer's webhook refuses the TrainJob"
    if "torch" in policy:
        _upsert_env(node["env"], _torch_env(name, nodes, trainer))
    elif "xgboost" in policy:
        _upsert_env(node["env"], _xgboost_env(name, nodes, node))
    node.setdefault("ports", []).append({"containerPort": TRAINER_PORT})  # torch.go / xgboost.go:142-144 UpsertPort
    pod["spec"].setdefault("restartPolicy", "OnFailure")  # jobset_webhook.go:124-127
    if trainjob["spec"].get("suspend"):
        spec["suspend"] = job["template"]["spec"]["suspend"] = True  # jobset.go:425; jobset_controller.go:968-970
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": trainjob["metadata"]["namespace"],
                         "ownerReferences": [{"apiVersion": trainjob["apiVersion"], "kind": "TrainJob", "name": name,
                                              "uid": trainjob["metadata"]["uid"], "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": spec}


def pods_of(jobset: dict) -> list[dict]:
    """The pods of the JobSet's one Job (``<jobset>-<job>-0``), as JobSet and the Job controller make them:
    hostname ``<jobset>-<job>-0-<index>`` (Job controller: ``<job name>-<index>``), subdomain the
    JobSet's name (jobset_controller.go ``constructJob``, ``GetSubdomain``), the completion-index
    annotation and JOB_COMPLETION_INDEX (the Job controller's, as tests/job_controller.py cites them). Each is
    ``{"hostname", "subdomain", "container", "fields", "env"}``: ``fields`` answers the downward API."""
    name = jobset["metadata"]["name"]
    (job,) = jobset["spec"]["replicatedJobs"]
    pod = job["template"]["spec"]["template"]
    (node,) = [c for c in pod["spec"]["containers"] if c["name"] == "node"]
    subdomain = (jobset["spec"].get("network") or {}).get("subdomain") or name
    return [{"hostname": f"{name}-{job['name']}-0-{index}", "subdomain": subdomain, "container": node,
             "labels": pod.get("metadata", {}).get("labels", {}),
             "fields": {COMPLETION_INDEX_FIELD: str(index)}, "env": {"JOB_COMPLETION_INDEX": str(index)}}
            for index in range(job["template"]["spec"]["completions"])]
