"""What Kubeflow Trainer v2's, JobSet's and the Job controller's reconcilers make of a TrainJob on the
``torch-distributed`` runtime, for tests that play them (the test cluster runs no controller).

Each step names the upstream code it follows: kubeflow/trainer v2.3.0 (658725bdae5c7e3a0854d93ac6ff492e109a22ab),
kubernetes-sigs/jobset v0.12.0 (f22e565ac3cc3265c7c45ef67ecffdc689af5d77), kubernetes' Job controller.
Only what a TrainJob of this provider uses is played: one trainer Job (``node``), no initializers.
"""

from __future__ import annotations

import copy

import yaml

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
RUNTIMES = {runtime["metadata"]["name"]: runtime for runtime in (TORCH_DISTRIBUTED, AIRFLOW_ML_TORCH)}
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


def runtime_of(trainjob: dict) -> dict:
    """The ClusterTrainingRuntime the TrainJob names, of those the tests install (``RUNTIMES``)."""
    return RUNTIMES[trainjob["spec"]["runtimeRef"]["name"]]


def jobset_for(trainjob: dict, runtime: dict | None = None) -> dict:
    """The JobSet Trainer creates for ``trainjob`` (on ``runtime``, default the one it names): the runtime's
    template with the runtime patches merged (trainingruntime.go ``mergeRuntimePatches``), the trainer Job's
    parallelism and completions set to numNodes (plugins/jobset/jobset.go ``Build``), the ``node`` container's
    image, command, env and resources from the TrainJob's trainer (plugins/jobset/builder.go ``Trainer``;
    trainingruntime.go), then the torch plugin's PET_* variables and port (plugins/torch/torch.go
    ``EnforceMLPolicy``); named after the TrainJob and owned by it (jobset.go ``Build``); then JobSet's
    webhook's defaults for a pod template without restartPolicy: OnFailure (kubernetes-sigs/jobset v0.12.0
    pkg/webhooks/jobset_webhook.go:124-127)."""
    runtime = runtime or runtime_of(trainjob)
    name, trainer = trainjob["metadata"]["name"], trainjob["spec"]["trainer"]
    spec = copy.deepcopy(runtime["spec"]["template"]["spec"])
    (job,) = spec["replicatedJobs"]
    pod = job["template"]["spec"]["template"]
    for patch in trainjob["spec"].get("runtimePatches") or []:
        for replicated in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
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
    _upsert_env(node["env"], [
        {"name": "PET_NNODES", "value": str(nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": str(trainer.get("numProcPerNode", "auto"))},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_FIELD}}},
        {"name": "PET_MASTER_ADDR", "value": f"{name}-node-0-0.{name}"},
        {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)},
    ])
    node.setdefault("ports", []).append({"containerPort": TRAINER_PORT})
    pod["spec"].setdefault("restartPolicy", "OnFailure")  # jobset_webhook.go:124-127
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
    annotation and JOB_COMPLETION_INDEX (kubernetes pkg/controller/job/indexed_job_utils.go). Each is
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
