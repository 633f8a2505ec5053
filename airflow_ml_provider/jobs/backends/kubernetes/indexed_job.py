"""A plain batch/v1 Indexed Job plus a headless Service: needs no operator installed in the cluster.

The natural backend for LightGBM: pod ``i`` gets the stable hostname ``<job>-<i>.<job>`` and its
index as ``JOB_COMPLETION_INDEX``, so every worker can be told the full machine list up front.
PyTorch runs one torchrun agent per pod, by static rendezvous (``torchrun.static_args``, as on volcano and
trainjob): node ``i`` is the pod of completion index ``i`` (``--node-rank $(JOB_COMPLETION_INDEX)``) and node 0
hosts the store at its stable name, ``--master-addr <job>-0.<job> --master-port 29400``.
XGBoost's tracker runs beside the worker of pod 0 (``jobs.xgboost``), which every worker reaches at
``<job>-0.<job>:9091`` (``DMLC_TRACKER_URI``/``DMLC_TRACKER_PORT``), ``DMLC_TASK_ID`` its completion index.

Why not c10d (``--rdzv-endpoint <job>-0.<job>:29400``, before): there the agent that hosts the store is the one
whose machine the endpoint's name resolves to, decided once by a lookup when the agent starts (torch 2.13.0
torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py:145, ``is_host = _matches_machine_hostname(host)``;
utils.py:117-165: the name, the hostname, or the name's addresses among the machine's). Pod 0's name is
``<job>-0.<job>`` only in cluster DNS, as a record of the headless Service (the kubelet's /etc/hosts holds
``<job>-0.<job>.<ns>.svc.cluster.local`` and ``<job>-0``): while that record is not there yet, pod 0's lookup
fails, no agent hosts the store, and every agent waits on it until its rendezvous times out. Under static
rendezvous the host is node rank 0 (static_tcp_rendezvous.py:65, ``is_master = self.rank == 0``), so pod 0
always serves the store, and every agent's connection to ``<job>-0.<job>`` retries until the name resolves.
The values come from the Job controller (kubernetes/kubernetes pkg/controller/job/indexed_job_utils.go:455-484 at
78fc8e44052f: every container gets ``JOB_COMPLETION_INDEX`` from the pod's completion index; job_controller.go:1679
at 6ae037f1db84: hostname ``<job>-<index>``; tests/job_controller.py plays both) and the kubelet's ``$(VAR)``
expansion of the command (pkg/kubelet/container/helpers.go ``ExpandContainerCommandAndArgs``). The same in the
Kubernetes docs: "the control plane automatically sets the downward
API to expose the index in the JOB_COMPLETION_INDEX environment variable"
(https://kubernetes.io/docs/tasks/job/indexed-parallel-processing-static/), and JobSpec.completionMode: "the Pod
hostname takes the form $(job-name)-$(index)" (the batch/v1 API reference). The torch lines are torch 2.13.0's,
the version requirements/training.lock pins.

A sharded job (``TrainingJobSpec.shards``) is one Indexed Job of ``shards.count`` completions, ``num_workers`` pods at
once, pod ``i`` running shard ``i`` and committing it once, with per-shard retries by ``backoffLimitPerIndex`` where
the server has it (1.29 and later, read from its ``/version`` once per backend) and by the pod itself elsewhere; its
inputs in a ConfigMap of the job's name, no Service (its pods never talk to each other). See ``sharded``.
"""

from __future__ import annotations

import json
import logging
import os

from airflow_ml_provider.jobs import torchrun, xgboost
from airflow_ml_provider.jobs.backends.kubernetes import roles, sharded
from airflow_ml_provider.jobs.backends.kubernetes.base import KubernetesBackend
from airflow_ml_provider.jobs.backends.kubernetes.pod_template import (
    check_pod_security,
    container,
    deadline_s,
    metadata,
    pod_template,
    refuse_unused,
)
from airflow_ml_provider.jobs.backends.kubernetes.status import ended, said
from airflow_ml_provider.jobs.spec import Framework, TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState, JobStatus
from airflow_ml_provider.labels import JOB_NAME as JOB_NAME_LABEL

# Job condition types (batch/v1) and what each means once true.
CONDITION_STATES = {
    "Complete": JobState.SUCCEEDED,
    "Failed": JobState.FAILED,
    "Suspended": JobState.PENDING,
    "FailureTarget": JobState.FAILED,
    "SuccessCriteriaMet": JobState.SUCCEEDED,
}
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"  # the Job controller's (indexed_job_utils.go completionIndexEnvName)
log = logging.getLogger(__name__)
_told_no_gang = False


def check_options(spec: TrainingJobSpec) -> None:
    """Refuse what a plain Job cannot honour, naming the field: a queue needs a batch scheduler, elastic
    bounds a launcher that resizes. ``scheduling.gang`` (true by default, and so not told apart from a
    request once a spec has been copied) is a no-op here: workers start as they are placed, which the
    log says once per process."""
    global _told_no_gang
    if spec.scheduling.queue:
        raise ValueError(f"scheduling.queue: indexed-job has no queues (got {spec.scheduling.queue!r}); "
                         "use the volcano backend, or leave it unset")
    if spec.elastic:
        # A Job completes only when every index has: a pod replaced after the group finished could never
        # reach the rendezvous again, and would fail the Job that trained.
        raise ValueError("min_workers/max_workers: indexed-job runs a fixed number of workers; elastic bounds "
                         "need the local backend")
    refuse_unused(spec, "indexed-job", "clean_pod_policy", "slots_per_worker")
    check_pod_security(spec, "indexed-job")  # its pods need no root: "restricted" works for every framework
    if spec.framework in (Framework.PYTORCH, Framework.XGBOOST):  # they meet at the rendezvous or tracker port
        refuse_unused(spec, f"indexed-job ({spec.framework.value})", "worker_port")
    if spec.scheduling.gang and not _told_no_gang:
        _told_no_gang = True
        log.warning("scheduling.gang: indexed-job has no gang scheduler; its workers start as they are placed "
                    "(use volcano or mpijob to place them as a gang)")


def rendezvous(name: str, spec: TrainingJobSpec) -> dict[str, str]:
    """torchrun's static rendezvous in the Job's pods: node rank the completion index the Job controller gives
    every container (``$(JOB_COMPLETION_INDEX)``, filled in by the kubelet), node 0 pod 0 at its stable name."""
    return {"nnodes": str(spec.num_workers), "node-rank": f"$({COMPLETION_INDEX_ENV})",
            "master-addr": f"{name}-0.{name}", "master-port": str(torchrun.RENDEZVOUS_PORT)}


class IndexedJobBackend(KubernetesBackend):
    """``scheduling.priority_class`` becomes the pods' priorityClassName; see ``check_options`` for the rest.

    Args:
        per_index_retries: whether the cluster's Job controller retries a sharded job's shards itself
            (``backoffLimitPerIndex``); None: asked of the server's ``/version`` (1.29 or later) when a sharded job is
            first rendered, and no (the pods retry) without a server to ask.
    """

    name = "indexed-job"
    api_version = "batch/v1"
    kind = "Job"
    frameworks = frozenset({Framework.LIGHTGBM, Framework.PYTORCH, Framework.XGBOOST, Framework.TENSORFLOW_PS,
                            Framework.GENERIC})
    roles = True  # an Indexed Job per role behind the job's one headless Service (kubernetes.roles)
    shards = True  # a sharded job: an index per shard (kubernetes.sharded)
    watched_fields = (("completions",),)  # a sharded Job's shard count, for its progress (sharded.progress)
    suspend_field = ("spec", "suspend")  # Kueue's batch/job integration

    def __init__(self, *args, per_index_retries: bool | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.per_index_retries = per_index_retries

    def manifests(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> list[dict]:
        check_options(spec)
        if spec.shards is not None:
            return self._sharded(name, spec, labels)
        if spec.roles is not None:
            if self.queueing is not None:  # Kueue would admit each role's Job alone, not the job whole
                raise ValueError("roles: under Kueue, indexed-job would have each role's Job admitted alone; a job of "
                                 "several roles is admitted whole as one Volcano Job (backend volcano)")
            jobs = roles.indexed_jobs(name, spec, labels, lambda job: metadata(job, self.namespace, labels),
                                      deadline_s(spec), COMPLETION_INDEX_ENV)
            return [*jobs, _service(name, self.namespace, labels, roles.TF_PORT)]
        if spec.framework is Framework.PYTORCH:
            port, env = torchrun.RENDEZVOUS_PORT, {}
            command = ["torchrun", *torchrun.static_args(spec, rendezvous(name, spec))]
        elif spec.framework is Framework.XGBOOST:  # the tracker beside pod 0, at its stable name (jobs.xgboost)
            port, env = xgboost.TRACKER_PORT, xgboost.worker_env(f"{name}-0.{name}", xgboost.TRACKER_PORT, spec.num_workers)
            command = xgboost.pod_gate(spec.command, f"$({COMPLETION_INDEX_ENV})", spec.num_workers)
        else:
            port, command = spec.kubernetes.worker_port, spec.command
            machines = ",".join(f"{name}-{i}.{name}:{port}" for i in range(spec.num_workers))
            env = {"AIRFLOW_ML_MACHINES": machines, "AIRFLOW_ML_LOCAL_PORT": str(port)}  # rank: JOB_COMPLETION_INDEX
        template = pod_template(spec, labels, "worker", [container(spec, "worker", command, env=env, ports=[port])],
                                subdomain=name)
        job_spec = {
            "completionMode": "Indexed",
            "completions": spec.num_workers,
            "parallelism": spec.num_workers,
            "backoffLimit": spec.kubernetes.backoff_limit,
            "template": template,
        }
        if deadline := deadline_s(spec):
            job_spec["activeDeadlineSeconds"] = deadline
        return [{"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata(name, self.namespace, labels),
                 "spec": job_spec}, _service(name, self.namespace, labels, port)]

    def _sharded(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> list[dict]:
        """The Indexed Job of a sharded job and its plan's ConfigMap (``kubernetes.sharded``)."""
        refuse_unused(spec, "indexed-job (shards)", "worker_port")
        per_index = self._per_index()
        worker = container(spec, "worker", sharded.command(spec, per_index))
        worker["env"] += sharded.downward_env(per_index)
        template = pod_template(spec, labels, "worker", [worker])
        plan = sharded.plan_config_map(name, self.namespace, labels, spec.shards)
        if plan is not None:
            sharded.mount_plan(template, name)
        job_spec = {**sharded.job_fields(spec, per_index), "template": template}
        if deadline := deadline_s(spec):
            job_spec["activeDeadlineSeconds"] = deadline
        meta = {**metadata(name, self.namespace, {**labels, sharded.SHARDED_LABEL: "true"}),
                "annotations": sharded.annotation(spec.shards)}
        return [{"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job_spec}, *([plan] if plan else [])]

    def _per_index(self) -> bool:
        """Whether the Job controller retries each index (``per_index_retries``, else the server's version, read
        once; a server without Indexed Jobs refused)."""
        if self.per_index_retries is None:
            if self.api is None:
                return False
            try:
                version = self._call("GET", "/version")
            except Exception as exc:  # noqa: BLE001 - unknown: the pods retry, which every server runs
                log.warning("indexed-job: the server's /version could not be read (%s); a sharded job's pods retry "
                            "their shards themselves", exc)
                version = {}
            sharded.check_indexed(version)
            self.per_index_retries = sharded.per_index_supported(version)
        return self.per_index_retries

    def dependents(self, primary: dict, others: list[dict]) -> list[dict]:
        """A job of several roles: the other roles' Jobs owned by the chief's, deleted with it; a sharded job's plan
        ConfigMap owned by its Job too."""
        owner = {"apiVersion": primary["apiVersion"], "kind": primary["kind"], "name": primary["metadata"]["name"],
                 "uid": primary["metadata"]["uid"]}
        return [{**obj, "metadata": {**obj["metadata"], "ownerReferences": [owner]}} if obj["kind"] == "ConfigMap"
                else obj for obj in roles.owned_by(primary, others)]

    def owned_kinds(self) -> list[tuple[str, str]]:
        return [("batch/v1", "Job"), ("v1", "Service"), ("v1", "ConfigMap")]

    def replaces_lost_pods(self, obj: dict) -> bool:
        """A sharded Job's lost pod is the Job controller's to replace (its index gets a new pod, which runs only its
        shard): no preemption of the whole job, which would stop every shard in flight."""
        return ((obj.get("metadata") or {}).get("labels") or {}).get(sharded.SHARDED_LABEL) == "true"

    def job_result(self, name: str) -> dict | None:
        """A sharded job's result, as a local one's (``ShardQueue.result``): what its Job says and what is committed
        and recorded under its ``shards.output``, read from here (a URL, or a path this machine mounts too; where it
        cannot be read, from the Job's status alone, said in the log). None for a job that is not sharded."""
        from airflow_ml_provider.runtime.shards import records

        job = self.get(self.kind, name)
        plan = json.loads(((job.get("metadata") or {}).get("annotations") or {}).get(sharded.PLAN_ANNOTATION) or "{}")
        output = plan.get("output")
        if not output:
            return None
        if "://" not in output and not os.path.isdir(output):
            log.warning("indexed-job: %s (shards.output) is not readable here: job %s's result counts the shards its "
                        "Job completed, not their rows nor which of them an earlier job had committed", output, name)
            return sharded.result(job, None, {})
        return sharded.result(job, *records(output))

    def job_status(self, obj: dict) -> JobStatus:
        status = obj.get("status", {})
        for condition in status.get("conditions", []):
            if condition.get("status") != "True" or condition.get("type") not in CONDITION_STATES:
                continue
            if (told := sharded.shard_state(condition, status, self.replaces_lost_pods(obj))) is not None:
                return told
            state = CONDITION_STATES[condition["type"]]
            if state.is_terminal:
                return ended(state, said(condition, condition["type"]))
            if condition["type"] == "Suspended":
                return JobStatus(state, said(condition, condition["type"]))
        progress = sharded.progress(obj)
        if status.get("active"):
            return JobStatus(JobState.RUNNING, f"{status['active']} pod(s) active", progress=progress)
        return JobStatus(JobState.PENDING, "waiting for pods", progress=progress)


def _service(name: str, namespace: str, labels: dict[str, str], port: int) -> dict:
    """The headless Service that gives every pod of the job its stable name ``<host>.<job>``."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata(name, namespace, labels),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": {JOB_NAME_LABEL: name}, "ports": [{"name": "workers", "port": port}]}}
