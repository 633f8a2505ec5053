"""A job of several roles (``jobs.roles``) on a cluster: Volcano tasks (``volcano_tasks``) or an Indexed Job per
role (``indexed_jobs``), each role its own pod template (the role's command, image, resources and priority
class) and policy (the Indexed Jobs': ``indexed_jobs``).

On Volcano every pod listens on ``TF_PORT`` at the svc plugin's stable name ``<job>-<role>-<i>.<job>`` (volcano-sh/volcano
pkg/controllers/job/plugins/svc/svc.go: the pod's hostname ``<job>-<task>-<index>``, its subdomain the job's
headless Service) and gets ``TF_CONFIG`` with that cluster and its task type; its index comes from the env
plugin's ``VC_TASK_INDEX`` through the gate (``runtime.tf_config``), which the kubelet's ``$(VAR)`` expansion of the
argv fills in. The roles' policies as Volcano's:

- ``chief``: its pod's completion completes the job (``TaskCompleted -> CompleteJob``), its crash ends it (the
  backend's crash policy: ``AbortJob``, or ``RestartJob`` while ``kubernetes.backoff_limit`` allows);
- a ``fail`` role (``ps``): a Failed pod ends the job as the chief's crash does; an evicted pod stops it as on
  every Volcano job (the job-level ``PodEvicted -> AbortJob``: the provider resubmits a preempted job, which
  resumes from the chief's checkpoint);
- a ``tolerate`` role (``worker``): ``restartPolicy OnFailure``, so a crashed worker restarts in place and
  ``ClusterCoordinator`` takes it back; no policy of its own; ``min_count`` of its pods in the gang.
"""

from __future__ import annotations

import json

from airflow_ml_provider.jobs import roles as job_roles
from airflow_ml_provider.jobs.backends.kubernetes.pod_template import container, pod_template, refuse_unused
from airflow_ml_provider.jobs.spec import TrainingJobSpec

TF_PORT = 2222  # TensorFlow's own examples' port for every task of a cluster
GATE = ["python", "-m", "airflow_ml_provider.runtime.tf_config"]


def cluster(name: str, spec: TrainingJobSpec) -> dict[str, list[str]]:
    """Every role's addresses, at the svc plugin's names."""
    return {role: [f"{name}-{role}-{i}.{name}:{TF_PORT}" for i in range(spec.roles[role].count)] for role in spec.roles}


def role_spec(spec: TrainingJobSpec, role_name: str) -> TrainingJobSpec:
    """The job as one role's pods see it: the role's command, image, resources and priority class, else the job's."""
    role = spec.roles[role_name]
    scheduling = spec.scheduling.model_copy(update={"priority_class": role.priority_class or spec.scheduling.priority_class})
    return spec.model_copy(update={"command": role.command or spec.command, "image": role.image or spec.image,
                                   "resources": role.resources or spec.resources, "scheduling": scheduling})


def tolerated(spec: TrainingJobSpec, role_name: str) -> bool:
    return job_roles.policy(role_name, spec.roles[role_name]) is job_roles.OnFailure.TOLERATE


def role_pod(spec: TrainingJobSpec, labels: dict[str, str], role_name: str, addresses: dict[str, list[str]],
             index: str, **pod_fields) -> dict:
    """The pod template of one role: its container behind the gate (``index``: the controller's ``$(VAR)``),
    ``TF_CONFIG`` with the cluster's ``addresses`` and its task type; a tolerated role's pods restart in place."""
    own = role_spec(spec, role_name)
    env = {"TF_CONFIG": json.dumps({"cluster": addresses, "task": {"type": role_name, "index": 0}}, sort_keys=True),
           job_roles.ROLE_ENV: role_name}
    command = [*GATE, "--task-index", index, "--", *own.command]
    return pod_template(own, labels, role_name, [container(own, role_name, command, env=env, ports=[TF_PORT])],
                        restart_policy="OnFailure" if tolerated(spec, role_name) else "Never", **pod_fields)


def volcano_tasks(name: str, spec: TrainingJobSpec, labels: dict[str, str], crash_policy: dict,
                  pod_fields: dict) -> list[dict]:
    """One Volcano task per role (see the module's docstring); ``pod_fields``: every pod's own (its deadline)."""
    refuse_unused(spec, f"volcano ({spec.framework.value})", "worker_port")  # every task listens on TF_PORT
    addresses = cluster(name, spec)
    tasks = []
    for role_name, role in spec.roles.items():
        template = role_pod(spec, labels, role_name, addresses, "$(VC_TASK_INDEX)", **pod_fields)
        task = {"name": role_name, "replicas": role.count, "template": template}
        if role_name == "chief":
            task["policies"] = [{"event": "TaskCompleted", "action": "CompleteJob"}, dict(crash_policy)]
        elif not tolerated(spec, role_name):
            task["policies"] = [dict(crash_policy)]
        if role.min_count is not None:
            task["minAvailable"] = role.min_count
        tasks.append(task)
    return tasks


def job_name(name: str, role: str) -> str:
    """The Indexed Job of ``role``: the chief's is the job's own name (its status is the job's), the others
    ``<job>-<role>``; the Job controller names each pod's host ``<that name>-<index>``."""
    return name if role == "chief" else f"{name}-{role}"


def indexed_jobs(name: str, spec: TrainingJobSpec, labels: dict[str, str], metadata, deadline: int | None,
                 index_env: str) -> list[dict]:
    """An Indexed Job per role (the chief's first), every pod under the job's one headless Service (``name``):
    a ``fail`` role's pods never restart and its Job has no retries; a ``tolerate`` role's restart in place
    (``OnFailure``), and the chief's completion is the job's. ``metadata(name)``: an object's metadata."""
    refuse_unused(spec, f"indexed-job ({spec.framework.value})", "worker_port")  # every pod listens on TF_PORT
    addresses = {role: [f"{job_name(name, role)}-{i}.{name}:{TF_PORT}" for i in range(spec.roles[role].count)]
                 for role in spec.roles}
    jobs = []
    for role_name in sorted(spec.roles, key=lambda role: role != "chief"):
        role = spec.roles[role_name]
        template = role_pod(spec, labels, role_name, addresses, f"$({index_env})", subdomain=name)
        body = {"completionMode": "Indexed", "completions": role.count, "parallelism": role.count,
                "backoffLimit": spec.kubernetes.backoff_limit if role_name == "chief" or tolerated(spec, role_name) else 0,
                "template": template, **({"activeDeadlineSeconds": deadline} if deadline else {})}
        jobs.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata(job_name(name, role_name)),
                     "spec": body})
    return jobs


def owned_by(primary: dict, dependents: list[dict]) -> list[dict]:
    """``dependents`` (the other roles' Jobs) owned by the chief's Job as created (its uid): deleting the job
    deletes them with it (the garbage collector's)."""
    meta = primary["metadata"]
    owner = {"apiVersion": primary["apiVersion"], "kind": primary["kind"], "name": meta["name"], "uid": meta["uid"]}
    return [{**obj, "metadata": {**obj["metadata"], "ownerReferences": [owner]}} if obj["kind"] == primary["kind"]
            else obj for obj in dependents]
