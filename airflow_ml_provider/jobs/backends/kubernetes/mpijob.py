"""Kubeflow MPIJob (kubeflow.org/v2beta1): the standard way to run Horovod on Kubernetes.

A launcher pod runs ``horovodrun`` (or ``mpirun``) over the workers listed in the hostfile the MPI
operator mounts; workers run sshd. The operator reports progress as conditions.
"""

from __future__ import annotations

from airflow_ml_provider.jobs.backends.kubernetes.base import KubernetesBackend
from airflow_ml_provider.jobs.backends.kubernetes.pod_template import (
    container,
    deadline_s,
    metadata,
    pod_template,
    refuse_unused,
    user_argv,
)
from airflow_ml_provider.jobs.horovodrun import (
    MPI_OPERATOR_DISCOVERY,
    horovodrun_hosts,
)
from airflow_ml_provider.jobs.spec import Framework, TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState, JobStatus

HOSTFILE = "/etc/mpi/hostfile"
# Each condition type the MPI operator sets, and what it means for the job while it is the latest true one.
CONDITION_STATES = {
    "Created": JobState.PENDING,
    "Running": JobState.RUNNING,
    "Restarting": JobState.RESTARTING,
    "Suspended": JobState.PENDING,  # paused, not finished: if it is deleted while suspended, it vanished
    "Succeeded": JobState.SUCCEEDED,
    "Failed": JobState.FAILED,
}
_EVICTION = ("evict", "preempt", "disruption")


class MPIJobBackend(KubernetesBackend):
    """Gang scheduling (``scheduling.gang``, the default) takes effect only where the MPI operator runs
    with ``--gang-scheduling`` (the connection's ``gang_scheduler``): it then creates a PodGroup named
    after the job (kubeflow/mpi-operator pkg/controller/podgroup.go, ``newPodGroup``: ``Name: mpiJob.Name``)
    for Volcano or scheduler-plugins, whose scheduler the pod templates name. Without it the MPIJob
    runs as its pods get placed and no PodGroup is looked up."""

    name = "mpijob"
    api_version = "kubeflow.org/v2beta1"
    kind = "MPIJob"
    frameworks = frozenset({Framework.HOROVOD, Framework.GENERIC})
    suspend_field = ("spec", "runPolicy", "suspend")  # Kueue's MPIJob integration (kubeflow.org/mpijob)

    def manifests(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> list[dict]:
        refuse_unused(spec, self.name, "worker_port")  # workers talk MPI over ssh, not LightGBM's port
        slots = spec.kubernetes.slots_per_worker
        ranks = str(spec.num_workers * slots)
        if spec.framework is Framework.HOROVOD:
            hosts = horovodrun_hosts(spec, ["--hostfile", HOSTFILE], MPI_OPERATOR_DISCOVERY, slots)
            launch = ["horovodrun", "-np", ranks, *hosts, *user_argv(spec)]
        elif spec.elastic:
            raise ValueError("min_workers/max_workers: mpirun runs a fixed number of ranks; elastic bounds need "
                             "framework 'horovod'")
        else:
            launch = ["mpirun", "-np", ranks, "--hostfile", HOSTFILE, *user_argv(spec)]
        run_policy = {
            "cleanPodPolicy": spec.kubernetes.clean_pod_policy,
            "backoffLimit": spec.kubernetes.backoff_limit,
        }
        if deadline := deadline_s(spec):
            run_policy["activeDeadlineSeconds"] = deadline
        # the gang is the launcher plus the fewest workers the job can run with
        gang = (spec.min_workers or spec.num_workers) + 1
        run_policy["schedulingPolicy"] = {
            "minAvailable": gang if spec.scheduling.gang else 1,
            **({"queue": spec.scheduling.queue} if spec.scheduling.queue else {}),
            **({"priorityClass": spec.scheduling.priority_class} if spec.scheduling.priority_class else {}),
        }
        scheduler = {"schedulerName": self.gang_scheduler} if self.gang_scheduler else {}
        launcher = pod_template(spec, labels, "launcher", [container(spec, "launcher", launch, with_accelerators=False)],
                                restart_policy="OnFailure", with_accelerators=False, **scheduler)
        worker = pod_template(spec, labels, "worker", [container(spec, "worker", ["/usr/sbin/sshd", "-De"])],
                              **scheduler)
        return [{
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": metadata(name, self.namespace, labels),
            "spec": {
                "slotsPerWorker": slots,
                "launcherCreationPolicy": "WaitForWorkersReady",
                "mpiImplementation": "OpenMPI",
                "runPolicy": run_policy,
                "mpiReplicaSpecs": {
                    "Launcher": {"replicas": 1, "restartPolicy": "OnFailure", "template": launcher},
                    "Worker": {"replicas": spec.num_workers, "restartPolicy": "Never", "template": worker},
                },
            },
        }]

    def pod_group(self, obj: dict) -> tuple[str, str] | None:
        """The operator's PodGroup when the job names a gang scheduler and a gang of more than one pod."""
        launcher = obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"].get("spec") or {}
        scheduler = launcher.get("schedulerName")
        policy = (obj["spec"].get("runPolicy") or {}).get("schedulingPolicy") or {}
        if scheduler in (None, "", "default-scheduler") or policy.get("minAvailable", 2) <= 1:
            return None
        # the operator treats any gang scheduler but Volcano as scheduler-plugins (cmd/mpi-operator/app/options)
        group = "scheduling.volcano.sh/v1beta1" if scheduler == "volcano" else "scheduling.x-k8s.io/v1alpha1"
        return group, obj["metadata"]["name"]

    def job_status(self, obj: dict) -> JobStatus:
        true = {c["type"]: c for c in obj.get("status", {}).get("conditions", [])
                if c.get("status") == "True" and c.get("type") in CONDITION_STATES}
        if not true:
            return JobStatus(JobState.PENDING, "waiting for the MPI operator")
        final = [true[kind] for kind in ("Failed", "Succeeded") if kind in true]
        order = list(CONDITION_STATES)
        latest = final[0] if final else max(
            true.values(), key=lambda c: (c.get("lastTransitionTime") or "", order.index(c["type"])))
        message = f"{latest.get('reason', '')}: {latest.get('message', '')}".strip(": ")
        state = CONDITION_STATES[latest["type"]]
        if state is JobState.FAILED and any(word in message.lower() for word in _EVICTION):
            return JobStatus(JobState.PREEMPTED, message)
        return JobStatus(state, message)
