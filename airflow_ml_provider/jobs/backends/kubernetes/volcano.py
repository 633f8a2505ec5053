"""Volcano Job (batch.volcano.sh/v1alpha1): gang-scheduled batch jobs with queues and priorities.

Horovod runs as a ``master`` task (horovodrun over the workers' svc-plugin host names) plus a
``worker`` task running sshd; LightGBM and generic jobs are one ``worker`` task whose pods find each
other by the stable hostnames of the svc plugin. PyTorch runs one torchrun agent a pod in a ``master``
task of one pod and a ``worker`` task of the rest, numbered by Volcano's ``pytorch`` plugin.
"""

from __future__ import annotations

from airflow_ml_provider.jobs import torchrun
from airflow_ml_provider.jobs.backends.kubernetes.base import KubernetesBackend
from airflow_ml_provider.jobs.backends.kubernetes.pod_template import (
    ROLE_LABEL,
    container,
    deadline_s,
    metadata,
    pod_template,
    refuse_unused,
    user_argv,
)
from airflow_ml_provider.jobs.horovodrun import horovodrun_hosts, pod_discovery
from airflow_ml_provider.jobs.spec import Framework, TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState, JobStatus
from airflow_ml_provider.labels import JOB_NAME as JOB_NAME_LABEL

# Every phase of the Job CRD's status.state.phase enum. Aborted and Terminated jobs were stopped
# before finishing: failures, never successes.
PHASE_STATES = {
    "Pending": JobState.PENDING,
    "Running": JobState.RUNNING,
    "Restarting": JobState.RESTARTING,
    "Completing": JobState.RUNNING,
    "Completed": JobState.SUCCEEDED,
    "Aborting": JobState.FAILED,
    "Aborted": JobState.FAILED,
    "Terminating": JobState.FAILED,
    "Terminated": JobState.FAILED,
    "Failed": JobState.FAILED,
}
_EVICTION = ("evict", "preempt")
# Volcano's pytorch plugin (volcano-sh/volcano pkg/controllers/job/plugins/distributed-framework/pytorch/
# pytorch.go, OnPodCreate) gives every container of the "master" and "worker" tasks MASTER_ADDR (the
# master pod's <job>-master-0.<job>), MASTER_PORT (its --port, opened on every container), WORLD_SIZE
# (the pods of both tasks) and RANK (0 for the master, 1 + the pod's index for a worker). torchrun's static
# rendezvous takes them as its node numbering through the kubelet's $(VAR) expansion of the command.
TORCH_PLUGIN_PORT = 23456  # the plugin's DefaultPort, named in its arguments
_TORCH_PLUGIN_RENDEZVOUS = {"nnodes": "$(WORLD_SIZE)", "node-rank": "$(RANK)", "master-addr": "$(MASTER_ADDR)",
                            "master-port": "$(MASTER_PORT)"}


class VolcanoBackend(KubernetesBackend):
    """Volcano Jobs have no job-level deadline: ``timeout_s`` becomes every pod's activeDeadlineSeconds
    (a pod past it fails, and the job's PodFailed policy aborts the job)."""

    name = "volcano"
    api_version = "batch.volcano.sh/v1alpha1"
    kind = "Job"
    frameworks = frozenset({Framework.HOROVOD, Framework.LIGHTGBM, Framework.PYTORCH, Framework.GENERIC})

    def manifests(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> list[dict]:
        refuse_unused(spec, self.name, "clean_pod_policy")  # an MPIJob runPolicy field
        if spec.framework is not Framework.HOROVOD:
            refuse_unused(spec, f"{self.name} ({spec.framework.value})", "slots_per_worker")  # one rank a pod
        if spec.framework is Framework.HOROVOD:
            tasks = self._horovod_tasks(name, spec, labels)
            plugins = {"ssh": [], "svc": []}
        elif spec.framework is Framework.PYTORCH:
            refuse_unused(spec, f"{self.name} (pytorch)", "worker_port")  # the plugin opens its own port
            tasks = self._torch_tasks(spec, labels)
            plugins = {"pytorch": ["--master=master", "--worker=worker", f"--port={TORCH_PLUGIN_PORT}"], "svc": []}
        elif spec.elastic:
            raise ValueError(f"min_workers/max_workers: {spec.framework.value} workers are told a fixed machine "
                             "list; elastic bounds need framework 'horovod'")
        else:
            tasks = [self._peer_task(name, spec, labels)]
            plugins = {"svc": [], "env": []}
        total = sum(task["replicas"] for task in tasks)
        if spec.elastic:  # the gang is the launcher plus the fewest workers the job can run with
            total -= spec.num_workers - (spec.min_workers or spec.num_workers)
        job_spec = {
            "schedulerName": "volcano",
            "minAvailable": total if spec.scheduling.gang else 1,
            "maxRetry": spec.kubernetes.backoff_limit,
            "plugins": plugins,
            # an evicted (preempted) pod restarts the whole job, which resumes from its checkpoint
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
            "tasks": tasks,
        }
        if spec.scheduling.queue:
            job_spec["queue"] = spec.scheduling.queue
        if spec.scheduling.priority_class:
            job_spec["priorityClassName"] = spec.scheduling.priority_class
        return [{"apiVersion": self.api_version, "kind": self.kind,
                 "metadata": metadata(name, self.namespace, labels), "spec": job_spec}]

    def _horovod_tasks(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> list[dict]:
        slots = spec.kubernetes.slots_per_worker
        discovery = pod_discovery(f"{JOB_NAME_LABEL}={name},{ROLE_LABEL}=worker", slots)
        # The svc plugin's /etc/volcano/worker.host lists bare names, and horovodrun's --hostfile needs
        # "slots=" on every line; its names are fixed (<job>-worker-<i>.<job>), so they are listed here.
        workers = ",".join(f"{name}-worker-{i}.{name}:{slots}" for i in range(spec.num_workers))
        hosts = horovodrun_hosts(spec, ["-H", workers], discovery, slots)
        launch = ["horovodrun", "-np", str(spec.num_workers * slots), *hosts, *user_argv(spec)]
        master = pod_template(spec, labels, "master", [container(spec, "master", launch, with_accelerators=False)],
                              restart_policy="OnFailure", with_accelerators=False, **_deadline(spec))
        worker = pod_template(spec, labels, "worker", [container(spec, "worker", ["/usr/sbin/sshd", "-De"])],
                              restart_policy="OnFailure", **_deadline(spec))
        return [
            {"name": "master", "replicas": 1, "template": master,
             "policies": [{"event": "TaskCompleted", "action": "CompleteJob"},
                          {"event": "PodFailed", "action": "AbortJob"}]},
            {"name": "worker", "replicas": spec.num_workers, "template": worker},
        ]

    def _torch_tasks(self, spec: TrainingJobSpec, labels: dict[str, str]) -> list[dict]:
        """The plugin's two roles: node 0 is the master task's pod, node 1 + i the worker task's pod i."""
        command = ["torchrun", *torchrun.static_args(spec, _TORCH_PLUGIN_RENDEZVOUS)]
        tasks = []
        for role, replicas in (("master", 1), ("worker", spec.num_workers - 1)):
            if replicas:
                template = pod_template(spec, labels, role, [container(spec, role, command)], **_deadline(spec))
                tasks.append({"name": role, "replicas": replicas, "template": template,
                              "policies": [{"event": "PodFailed", "action": "AbortJob"}]})
        return tasks

    def _peer_task(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> dict:
        port = spec.kubernetes.worker_port
        machines = ",".join(f"{name}-worker-{i}.{name}:{port}" for i in range(spec.num_workers))
        env = {"AIRFLOW_ML_MACHINES": machines, "AIRFLOW_ML_LOCAL_PORT": str(port)}  # rank: VC_TASK_INDEX
        worker = pod_template(spec, labels, "worker",
                              [container(spec, "worker", spec.command, env=env, ports=[port])], **_deadline(spec))
        return {"name": "worker", "replicas": spec.num_workers, "template": worker,
                "policies": [{"event": "PodFailed", "action": "AbortJob"}]}

    def job_status(self, obj: dict) -> JobStatus:
        state = obj.get("status", {}).get("state", {})
        phase = state.get("phase") or "Pending"
        message = f"{state.get('reason', '')}: {state.get('message', '')}".strip(": ")
        if phase not in PHASE_STATES:
            raise ValueError(f"Volcano Job {obj['metadata']['name']}: unknown phase {phase!r}")
        mapped = PHASE_STATES[phase]
        if mapped is JobState.PENDING:
            return JobStatus(mapped, message or "Pending")
        if mapped is JobState.FAILED and any(word in message.lower() for word in _EVICTION):
            return JobStatus(JobState.PREEMPTED, f"{phase}: {message}")
        return JobStatus(mapped, f"{phase}: {message}".rstrip(": ") if mapped is JobState.FAILED else message)

    def pod_group(self, obj: dict) -> tuple[str, str] | None:
        """Volcano's PodGroup of the job, ``<job>-<uid>`` (volcano-sh/volcano pkg/controllers/job/
        job_controller_actions.go, ``generateRelatedPodGroupName``), when the job is a gang of more than one pod."""
        if (obj["spec"].get("schedulerName") or "volcano") != "volcano" or obj["spec"].get("minAvailable", 1) <= 1:
            return None
        return "scheduling.volcano.sh/v1beta1", f"{obj['metadata']['name']}-{obj['metadata']['uid']}"


def _deadline(spec: TrainingJobSpec) -> dict:
    return {"activeDeadlineSeconds": deadline} if (deadline := deadline_s(spec)) else {}
