"""Volcano Job (batch.volcano.sh/v1alpha1): gang-scheduled batch jobs with queues and priorities.

Horovod runs as a ``master`` task (horovodrun over the workers' svc-plugin host names) plus a
``worker`` task running sshd; LightGBM and generic jobs are one ``worker`` task whose pods find each
other by the stable hostnames of the svc plugin (XGBoost's: the tracker beside worker 0). PyTorch runs one torchrun agent a pod in a ``master``
task of one pod and a ``worker`` task of the rest, numbered by Volcano's ``pytorch`` plugin. A job of several
roles (tensorflow-ps) is a task per role (``kubernetes.roles``).
"""

from __future__ import annotations

from airflow_ml_provider.jobs import torchrun, xgboost
from airflow_ml_provider.jobs.backends.kubernetes.base import KubernetesBackend
from airflow_ml_provider.jobs.backends.kubernetes.pod_template import (
    ROLE_LABEL,
    check_pod_security,
    container,
    deadline_s,
    metadata,
    pod_template,
    refuse_unused,
    sshd_container,
    user_argv,
)
from airflow_ml_provider.jobs.backends.kubernetes.roles import volcano_tasks as role_tasks
from airflow_ml_provider.jobs.backends.kubernetes.status import ended, said
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
# Volcano's pytorch plugin (volcano-sh/volcano pkg/controllers/job/plugins/distributed-framework/pytorch/
# pytorch.go, OnPodCreate) gives every container of the "master" and "worker" tasks MASTER_ADDR (the
# master pod's <job>-master-0.<job>), MASTER_PORT (its --port, opened on every container), WORLD_SIZE
# (the pods of both tasks) and RANK (0 for the master, 1 + the pod's index for a worker). torchrun's static
# rendezvous takes them as its node numbering through the kubelet's $(VAR) expansion of the command.
TORCH_PLUGIN_PORT = 23456  # the plugin's DefaultPort, named in its arguments
_TORCH_PLUGIN_RENDEZVOUS = {"nnodes": "$(WORLD_SIZE)", "node-rank": "$(RANK)", "master-addr": "$(MASTER_ADDR)",
                            "master-port": "$(MASTER_PORT)"}
# A fixed-size Horovod job's master runs horovodrun once every worker's sshd answers. An elastic one's starts at
# once: its ring forms from the workers its discovery lists (Ready pods), whenever they join.
SSH_GATE = "airflow_ml_provider.runtime.ssh_gate"
# Why a Horovod job's pods cannot be "restricted": its workers run sshd as root, and the ssh plugin mounts the job's
# key at its sshKeyFilePath, /root/.ssh by default (pkg/controllers/job/plugins/ssh/ssh.go:68, const.go:33).
_NEEDS_ROOT = "a Horovod job's workers run sshd, which needs root, and the ssh plugin mounts the job's key under /root/.ssh"

# Restarts (volcano-sh/volcano ed72c7c815a9fd547a787134676f73d42e9d049c, pkg/controllers/job/). A job's pods are
# restarted by one owner each way they end:
# - preempted or evicted (a pod deleted: job_controller_handler.go:377 raises PodEvicted for any deleted pod of
#   the job that Volcano did not kill itself): the provider's, as on every backend (the pod's DisruptionTarget
#   makes the job PREEMPTED; the task deletes it and submits it again from its checkpoint, counted by
#   max_preemptions). Volcano only stops the job: PodEvicted -> AbortJob. A RestartJob here restarted it in
#   parallel, and with no policy the default SyncJob (job_controller_util.go:190-191) recreates the deleted pod
#   (job_controller_actions.go:475-480) inside a job the provider is replacing;
# - a crashed trainer (the pod's phase becomes Failed, which only a restartPolicy Never pod reaches; PodFailed is
#   raised on that transition alone, job_controller_handler.go:272-281): Volcano's, up to
#   kubernetes.backoff_limit restarts of the whole job (PodFailed -> RestartJob), none by default (AbortJob).
# maxRetry: Volcano's webhook rewrites 0 to 3 (webhooks/admission/jobs/mutate/mutate_job.go:161-166; tasks' at
# :220-223), and a restart that brings RetryCount to maxRetry fails the job instead (state/running.go:35-40
# counts it, state/restarting.go:33-39 compares), so maxRetry is backoff_limit + 1: 1, no restart, by default.
_PREEMPTION_POLICY = {"event": "PodEvicted", "action": "AbortJob"}


class VolcanoBackend(KubernetesBackend):
    """Volcano Jobs have no job-level deadline: ``timeout_s`` becomes every pod's activeDeadlineSeconds
    (a pod past it fails, and the job's PodFailed policy aborts the job)."""

    name = "volcano"
    api_version = "batch.volcano.sh/v1alpha1"
    kind = "Job"
    frameworks = frozenset({Framework.HOROVOD, Framework.LIGHTGBM, Framework.PYTORCH, Framework.XGBOOST,
                            Framework.TENSORFLOW_PS, Framework.GENERIC})
    roles = True  # a task per role (kubernetes.roles)
    watched_fields = (("schedulerName",), ("minAvailable",))

    def manifests(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> list[dict]:
        refuse_unused(spec, self.name, "clean_pod_policy")  # an MPIJob runPolicy field
        check_pod_security(spec, self.name, _NEEDS_ROOT if spec.framework is Framework.HOROVOD else None)
        if spec.framework is not Framework.HOROVOD:
            refuse_unused(spec, f"{self.name} ({spec.framework.value})", "slots_per_worker")  # one rank a pod
        if spec.framework is Framework.HOROVOD:
            tasks = self._horovod_tasks(name, spec, labels)
            plugins = {"ssh": [], "svc": []}
        elif spec.framework is Framework.PYTORCH:
            refuse_unused(spec, f"{self.name} (pytorch)", "worker_port")  # the plugin opens its own port
            tasks = self._torch_tasks(spec, labels)
            plugins = {"pytorch": ["--master=master", "--worker=worker", f"--port={TORCH_PLUGIN_PORT}"], "svc": []}
        elif spec.roles is not None:
            tasks = role_tasks(name, spec, labels, _crash_policy(spec), _deadline(spec))
            plugins = {"svc": [], "env": []}
        elif spec.elastic:
            raise ValueError(f"min_workers/max_workers: {spec.framework.value} workers are told a fixed machine "
                             "list; elastic bounds need framework 'horovod'")
        else:
            tasks = [self._peer_task(name, spec, labels)]
            plugins = {"svc": [], "env": []}
        # the gang: every pod, or for an elastic job the master and the fewest workers it runs with
        total = sum(task.get("minAvailable", task["replicas"]) for task in tasks)
        job_spec = {
            "schedulerName": "volcano",
            "minAvailable": total if spec.scheduling.gang else 1,
            "maxRetry": spec.kubernetes.backoff_limit + 1,
            "plugins": plugins,
            "policies": [dict(_PREEMPTION_POLICY)],
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
        if not spec.elastic:  # the master starts with its workers: it waits for their sshd (runtime.ssh_gate)
            launch = ["python", "-m", SSH_GATE, workers, "--", *launch]
        # The master runs horovodrun, whose exit is the job's: Never, so that a failed run is a Failed pod and its
        # PodFailed policy fires (under OnFailure the kubelet restarted it in place: CrashLoopBackOff, the job
        # Running until its deadline). The workers' sshd may restart in place: no policy reads their PodFailed
        # (a fixed-size job's lost worker fails horovodrun on the master; an elastic one's ring goes on).
        # as_root: the workers' sshd, and the master's ssh with the key the ssh plugin mounts under /root/.ssh
        master = pod_template(spec, labels, "master", [container(spec, "master", launch, with_accelerators=False)],
                              restart_policy="Never", with_accelerators=False, as_root=True, **_deadline(spec))
        worker = pod_template(spec, labels, "worker", [sshd_container(spec)],
                              restart_policy="OnFailure", as_root=True, **_deadline(spec))
        workers_task = {"name": "worker", "replicas": spec.max_workers or spec.num_workers, "template": worker}
        if spec.elastic:
            # max_workers pods (the pod discovery lists the Ready ones), min_workers of them in the gang: a task's
            # minAvailable defaults to its replicas (mutate_job.go:205-217), and the scheduler holds a job whose
            # tasks have fewer than their minAvailable placed (pkg/scheduler/api/job_info.go:1073-1101)
            workers_task["minAvailable"] = spec.min_workers or spec.num_workers
        return [
            {"name": "master", "replicas": 1, "template": master,
             "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}, _crash_policy(spec)]},
            workers_task,
        ]

    def _torch_tasks(self, spec: TrainingJobSpec, labels: dict[str, str]) -> list[dict]:
        """The plugin's two roles: node 0 is the master task's pod, node 1 + i the worker task's pod i."""
        command = ["torchrun", *torchrun.static_args(spec, _TORCH_PLUGIN_RENDEZVOUS)]
        tasks = []
        for role, replicas in (("master", 1), ("worker", spec.num_workers - 1)):
            if replicas:
                template = pod_template(spec, labels, role, [container(spec, role, command)], **_deadline(spec))
                tasks.append({"name": role, "replicas": replicas, "template": template, "policies": [_crash_policy(spec)]})
        return tasks

    def _peer_task(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> dict:
        """One task of peers: LightGBM's (told the machine list) and generic workers, or XGBoost's, whose tracker
        runs beside worker 0 at the svc plugin's name for it (jobs.xgboost), DMLC_TASK_ID the env plugin's index."""
        command = spec.command
        if spec.framework is Framework.XGBOOST:
            refuse_unused(spec, f"{self.name} (xgboost)", "worker_port")  # the workers meet at the tracker's port
            port = xgboost.TRACKER_PORT
            env = xgboost.worker_env(f"{name}-worker-0.{name}", port, spec.num_workers)
            command = xgboost.pod_gate(spec.command, "$(VC_TASK_INDEX)", spec.num_workers)
        else:
            port = spec.kubernetes.worker_port
            machines = ",".join(f"{name}-worker-{i}.{name}:{port}" for i in range(spec.num_workers))
            env = {"AIRFLOW_ML_MACHINES": machines, "AIRFLOW_ML_LOCAL_PORT": str(port)}  # rank: VC_TASK_INDEX
        worker = pod_template(spec, labels, "worker",
                              [container(spec, "worker", command, env=env, ports=[port])], **_deadline(spec))
        return {"name": "worker", "replicas": spec.num_workers, "template": worker, "policies": [_crash_policy(spec)]}

    def job_status(self, obj: dict) -> JobStatus:
        state = obj.get("status", {}).get("state", {})
        phase = state.get("phase") or "Pending"
        message = said(state)
        if phase not in PHASE_STATES:
            raise ValueError(f"Volcano Job {obj['metadata']['name']}: unknown phase {phase!r}")
        mapped = PHASE_STATES[phase]
        if mapped is JobState.PENDING:
            return JobStatus(mapped, message or "Pending")
        if mapped is JobState.FAILED:
            return ended(mapped, f"{phase}: {message}".rstrip(": "))
        return JobStatus(mapped, message)

    def pod_group(self, obj: dict) -> tuple[str, str] | None:
        """Volcano's PodGroup of the job, ``<job>-<uid>`` (volcano-sh/volcano pkg/controllers/job/
        job_controller_actions.go, ``generateRelatedPodGroupName``), when the job is a gang of more than one pod."""
        if (obj["spec"].get("schedulerName") or "volcano") != "volcano" or obj["spec"].get("minAvailable", 1) <= 1:
            return None
        return "scheduling.volcano.sh/v1beta1", f"{obj['metadata']['name']}-{obj['metadata']['uid']}"


def _crash_policy(spec: TrainingJobSpec) -> dict:
    """What a task's Failed pod (restartPolicy Never: its trainer exited non-zero) does to the job: AbortJob, or
    RestartJob while kubernetes.backoff_limit allows (see the restarts note above)."""
    return {"event": "PodFailed", "action": "RestartJob" if spec.kubernetes.backoff_limit else "AbortJob"}


def _deadline(spec: TrainingJobSpec) -> dict:
    return {"activeDeadlineSeconds": deadline} if (deadline := deadline_s(spec)) else {}
