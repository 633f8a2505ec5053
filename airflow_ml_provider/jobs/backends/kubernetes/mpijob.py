"""Kubeflow MPIJob (kubeflow.org/v2beta1): the standard way to run Horovod on Kubernetes.

A launcher pod runs ``horovodrun`` over the workers listed in the hostfile the MPI operator mounts (an elastic
job's, over the Ready workers its pod discovery lists); workers run sshd. The operator reports progress as
conditions. A generic job's ranks are started the same way: the training image has no MPI
(scripts/build_horovod.sh builds Horovod with ``HOROVOD_WITHOUT_MPI=1`` and images/training/Dockerfile installs no
OpenMPI), so ``mpirun`` would exit 127; horovodrun without MPI runs its Gloo launcher (Horovod 0.28.1
runner/launch.py:769-776, ``run_controller``: ``mpi_built()`` false, ``gloo_built()`` true), which starts each rank
over the operator's ssh with ``HOROVOD_RANK``/``HOROVOD_SIZE`` in its environment (runner/gloo_run.py:70-71).
"""

from __future__ import annotations

from airflow_ml_provider.jobs.backends.kubernetes.base import KubernetesBackend
from airflow_ml_provider.jobs.backends.kubernetes.pod_template import (
    check_pod_security,
    container,
    deadline_s,
    metadata,
    pod_template,
    refuse_unused,
    sshd_container,
    user_argv,
)
from airflow_ml_provider.jobs.backends.kubernetes.status import ended, said
from airflow_ml_provider.jobs.horovodrun import horovodrun_hosts, pod_discovery
from airflow_ml_provider.jobs.spec import Framework, TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState, JobStatus

HOSTFILE = "/etc/mpi/hostfile"
# An elastic job's workers: the labels the MPI operator gives each worker pod of the MPIJob, over its template's
# (kubeflow/mpi-operator v0.8.0 pkg/controller/mpi_job_controller.go:1482-1484, newWorker, from defaultLabels
# :1743-1749; keys and "mpi-operator": pkg/apis/kubeflow/v2beta1/constants.go:25, :39-45). It is the operator's own
# workerSelector (:1751-1754), the pods its discover_hosts.sh is made of (:834-852). That script lists every Running
# one (:846), also one whose sshd does not listen yet, and horovodrun's first ssh to it failed; the pod discovery
# lists only the Ready ones (runtime.pod_discovery), so the launcher's service account needs ``list pods``.
WORKER_SELECTOR = ("training.kubeflow.org/operator-name=mpi-operator,training.kubeflow.org/job-name={name},"
                   "training.kubeflow.org/job-role=worker")
# Each condition type the MPI operator sets, and what it means for the job while it is the latest true one.
CONDITION_STATES = {
    "Created": JobState.PENDING,
    "Running": JobState.RUNNING,
    "Restarting": JobState.RESTARTING,
    "Suspended": JobState.PENDING,  # paused, not finished: if it is deleted while suspended, it vanished
    "Succeeded": JobState.SUCCEEDED,
    "Failed": JobState.FAILED,
}
# Why no MPIJob pod can be "restricted": the workers run sshd as root, and the operator mounts the job's SSH key
# at spec.sshAuthMountPath, /root/.ssh by default (pkg/apis/kubeflow/v2beta1/default.go:65-66; mounted by
# mpi_job_controller.go:1764-1787, setupSSHOnPod).
_NEEDS_ROOT = "its workers run sshd, which needs root, and the MPI operator mounts the job's SSH key under /root/.ssh"


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
    watched_fields = (("mpiReplicaSpecs", "Launcher", "template", "spec", "schedulerName"),
                   ("runPolicy", "schedulingPolicy"))

    def manifests(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> list[dict]:
        refuse_unused(spec, self.name, "worker_port")  # workers talk MPI over ssh, not LightGBM's port
        check_pod_security(spec, self.name, _NEEDS_ROOT)
        slots = spec.kubernetes.slots_per_worker
        ranks = str(spec.num_workers * slots)
        if spec.framework is not Framework.HOROVOD:
            if spec.elastic:
                raise ValueError("min_workers/max_workers: a generic job runs a fixed number of ranks; elastic "
                                 "bounds need framework 'horovod'")
            refuse_unused(spec, f"{self.name} (generic)", "slots_per_worker")  # one rank a worker, as everywhere
        discovery = pod_discovery(WORKER_SELECTOR.format(name=name), slots)
        hosts = horovodrun_hosts(spec, ["--hostfile", HOSTFILE], discovery, slots)
        launch = ["horovodrun", "-np", ranks, *hosts, *user_argv(spec)]
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
        # restartPolicy only in the replica specs: the operator copies each onto its pods (mpi_job_controller.go
        # :1500 and :1616, setRestartPolicy :1693-1699) and records a Warning event on the MPIJob for a launcher
        # template that sets one too (:1609-1615, "SetPodTemplateRestartPolicy").
        # as_root: the workers' sshd, and the launcher's ssh with the key the operator mounts under /root/.ssh
        launcher = pod_template(spec, labels, "launcher", [container(spec, "launcher", launch, with_accelerators=False)],
                                restart_policy=None, with_accelerators=False, as_root=True, **scheduler)
        worker = pod_template(spec, labels, "worker", [sshd_container(spec)],
                              restart_policy=None, as_root=True, **scheduler)
        return [{
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": metadata(name, self.namespace, labels),
            "spec": {
                "slotsPerWorker": slots,
                # An elastic job starts its launcher at once: WaitForWorkersReady creates it only when every
                # worker pod is ready (mpi_job_controller.go:678), and up to max_workers exist, not all placed.
                "launcherCreationPolicy": "AtStartup" if spec.elastic else "WaitForWorkersReady",
                "mpiImplementation": "OpenMPI",
                "runPolicy": run_policy,
                "mpiReplicaSpecs": {
                    # Never: each retry (runPolicy.backoffLimit, the launcher Job's backoffLimit: :1543) is a
                    # fresh pod, so backoff_limit N runs the launcher N + 1 times. OnFailure restarted it in place
                    # and the Job controller counts restarts (kubernetes pkg/controller/job/job_controller.go,
                    # pastBackoffLimitOnFailure: with backoffLimit 0 any restart fails the Job): the kubelet had
                    # already started a second horovodrun before the Job failed.
                    "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": launcher},
                    # Elastic: max_workers pods, of which the pod discovery lists the Ready ones; horovodrun grows
                    # the ring up to --max-np as they start.
                    "Worker": {"replicas": spec.max_workers or spec.num_workers, "restartPolicy": "Never",
                               "template": worker},
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
        message, state = said(latest), CONDITION_STATES[latest["type"]]
        if state.is_terminal:
            return ended(state, message)
        replicas = obj.get("status", {}).get("replicaStatuses") or {}
        if latest["type"] == "Created" and (replicas.get("Launcher") or {}).get("active"):
            # The operator sets Running only once every worker pod runs (mpi_job_controller.go:1163), which an
            # elastic job of max_workers pods may never see; a running launcher (its Active count, :1127) is
            # the job running.
            workers = (replicas.get("Worker") or {}).get("active", 0)
            return JobStatus(JobState.RUNNING, f"the launcher runs, {workers} worker pod(s) running")
        return JobStatus(state, message)
