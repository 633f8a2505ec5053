"""What the MPI operator's controller makes of an MPIJob, and its pods run as containers (tests/pod_containers.py).

Taken from kubeflow/mpi-operator v0.8.0 (101db144e019e1de65aaded07745e9d805c2852a); ``mpi_job_controller.go`` is
pkg/controller/mpi_job_controller.go and ``default.go`` pkg/apis/kubeflow/v2beta1/default.go there. Played for the
OpenMPI implementation without runLauncherAsWorker, the only ones the provider renders (mpijob.py), and without
a PodGroup (no gang scheduler runs here):

- defaults: slotsPerWorker 1, sshAuthMountPath /root/.ssh, launcherCreationPolicy AtStartup, cleanPodPolicy None,
  replica restartPolicy Never (launcher) / Never (worker) (default.go:26-80; constants.go DefaultRestartPolicy);
- the headless Service ``<job>`` over launcher and workers (mpi_job_controller.go:1384-1413): the pods' subdomain;
- the ConfigMap ``<job>-config``: ``hostfile`` with ``<worker>.<job>.<ns>.svc slots=<n>`` per worker (:1309-1354)
  and ``discover_hosts.sh`` echoing the Running workers sorted by name (:1357-1381, :834-852), rewritten while the
  job runs (:869-905); mounted on the launcher's /etc/mpi with modes 0444 and 0555 (:157-166, :1621-1636);
- the Secret ``<job>-ssh``: an ECDSA P-521 key as ``ssh-privatekey``/``ssh-publickey`` (:1416-1451), mounted on
  every pod at sshAuthMountPath as id_rsa, id_rsa.pub and authorized_keys, mode 0600 under /root/.ssh
  (:142-155, :1764-1787);
- workers ``<job>-worker-<i>``: hostname the pod's name, subdomain the job, the search
  ``<job>.<ns>.svc.cluster.local`` added, the replica spec's restartPolicy, ``/usr/sbin/sshd -De`` when the template
  has no command, ``K_MPI_JOB_ROLE=worker`` appended (:1473-1526, :1693-1699, :170-179);
- the launcher Job ``<job>-launcher`` (backoffLimit, activeDeadlineSeconds from runPolicy: :1528-1551), its pod's
  hostname ``<job>-launcher``, subdomain the job, ``K_MPI_JOB_ROLE=launcher``, the OpenMPI variables and
  ``OMPI_MCA_orte_set_default_slots``, NVIDIA_VISIBLE_DEVICES/NVIDIA_DRIVER_CAPABILITIES emptied (:1556-1645,
  :180-219), created at once (AtStartup) or once every worker pod is Ready (WaitForWorkersReady, :677-686,
  :854-865). Its Job's pods restart as the Job controller does for restartPolicy Never: a new pod per failure
  while failures <= backoffLimit (kubernetes pkg/controller/job/job_controller.go:842, :857-860 at 6ae037f1db84;
  tests/job_controller.py).

A suspended MPIJob (``runPolicy.suspend``, as Kueue's integration submits it) gets its Service, ConfigMap and
Secret but no worker pod and a suspended launcher Job, so no pod at all (:650-686 and :1547-1549); ``run``
returns None for it until it is unsuspended (Kueue's admission: tests/kueue_controller.py).

With ``api`` (tests/pod_api.py) the worker pods are Pod objects of a real API server as well, with the labels
newWorker gives them (``worker_labels``), their phase and readiness reported as the kubelet would (the rendered TCP
readiness probe checked until it passes), and every pod gets the kubelet's API address and service account token:
for the elastic launcher's pod discovery, which lists the Ready ones.

A worker pod is Ready here once its readiness probe's TCP check passes (the provider's sshd workers have one on
port 22); a pod without a probe is Ready when its container has started, and the launcher's first ssh then races
sshd's start, which OpenMPI's ``-o ConnectionAttempts=10`` covers and horovodrun's ssh check does not.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import threading
import time
from pathlib import Path

from pod_api import PodApi
from pod_containers import PodNetwork

SSH_MOUNT_DEFAULT = "/root/.ssh"  # default.go:65-67
CONFIG_MOUNT = "/etc/mpi"  # mpi_job_controller.go:76


def worker_labels(mpijob: dict, index: int) -> dict[str, str]:
    """A worker pod's labels (newWorker, mpi_job_controller.go:1478-1485): the template's, then defaultLabels
    (:1743-1749; keys and OperatorName in pkg/apis/kubeflow/v2beta1/constants.go:25, :39-45) and the replica index
    (``workerReplicaIndexLabel`` :1461-1468: the index, without runLauncherAsWorker)."""
    template = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    return {**((template.get("metadata") or {}).get("labels") or {}),
            "training.kubeflow.org/operator-name": "mpi-operator",
            "training.kubeflow.org/job-name": mpijob["metadata"]["name"],
            "training.kubeflow.org/job-role": "worker",
            "training.kubeflow.org/replica-index": str(index)}


def with_defaults(mpijob: dict) -> dict:
    """SetDefaults_MPIJob (default.go:60-80) and the replica defaults (:26-50)."""
    job = copy.deepcopy(mpijob)
    spec = job["spec"]
    spec.setdefault("runPolicy", {}).setdefault("cleanPodPolicy", "None")
    spec.setdefault("slotsPerWorker", 1)
    spec.setdefault("sshAuthMountPath", SSH_MOUNT_DEFAULT)
    spec.setdefault("mpiImplementation", "OpenMPI")
    spec.setdefault("launcherCreationPolicy", "AtStartup")
    for role in ("Launcher", "Worker"):
        replica = spec["mpiReplicaSpecs"].get(role)
        if replica is not None:
            replica.setdefault("restartPolicy", "Never")  # DefaultLauncherRestartPolicy / DefaultRestartPolicy
            replica.setdefault("replicas", 1 if role == "Launcher" else 0)
    return job


class MPIOperator:
    """Reconciles one MPIJob: its Secret, ConfigMap and pods, then follows the launcher Job to its end."""

    def __init__(self, mpijob: dict, pods: PodNetwork, directory: Path, claims: dict[str, Path],
                 api: PodApi | None = None):
        self.job = with_defaults(mpijob)
        self.name, self.namespace = self.job["metadata"]["name"], pods.namespace
        self.pods, self.directory, self.claims, self.api = pods, directory, claims, api
        self._ready_pods: set[str] = set()
        spec = self.job["spec"]
        assert spec["mpiImplementation"] == "OpenMPI" and not spec.get("runLauncherAsWorker"), "not played here"
        self.workers = [f"{self.name}-worker-{i}" for i in range(spec["mpiReplicaSpecs"]["Worker"]["replicas"])]
        self.launcher = f"{self.name}-launcher"
        self.ssh_dir = self._ssh_secret()
        self.config_dir = self._config_map()
        self._stop = threading.Event()
        self._discovery = threading.Thread(target=self._keep_discovery, daemon=True)
        self.launcher_pods: list[str] = []

    def _fqdn(self, pod: str) -> str:
        return f"{pod}.{self.name}.{self.namespace}.svc"  # domainFormat, clusterDomain "" (options.go:85)

    def _ssh_secret(self) -> Path:
        """newSSHAuthSecret (:1416-1451) as setupSSHOnPod mounts it (:1764-1787, items :142-155)."""
        secret = self.directory / f"{self.name}-ssh"
        secret.mkdir(parents=True)
        subprocess.run(["ssh-keygen", "-t", "ecdsa", "-b", "521", "-m", "PEM", "-N", "", "-q", "-f",
                        str(secret / "id_rsa")], check=True)
        shutil.copy(secret / "id_rsa.pub", secret / "authorized_keys")
        mode = 0o600 if self.job["spec"]["sshAuthMountPath"] == SSH_MOUNT_DEFAULT else 0o644  # DefaultMode nil: 0644
        for path in secret.iterdir():
            path.chmod(mode)
        return secret

    def _config_map(self) -> Path:
        """newConfigMap's hostfile (:1309-1354), discover_hosts.sh with no worker Running yet."""
        config = self.directory / f"{self.name}-config"
        config.mkdir(parents=True)
        slots = self.job["spec"]["slotsPerWorker"]
        (config / "hostfile").write_text("".join(f"{self._fqdn(w)} slots={slots}\n" for w in self.workers))
        (config / "hostfile").chmod(0o444)
        self._write_discovery(config, [])
        return config

    @staticmethod
    def _write_discovery(config: Path, running: list[str]) -> None:
        """updateDiscoverHostsInConfigMap (:1357-1381); the kubelet swaps a ConfigMap volume's files atomically."""
        partial = config / ".discover_hosts.sh.partial"
        partial.write_text("#!/bin/sh\n" + "".join(f"echo {host}\n" for host in running))
        partial.chmod(0o555)
        partial.replace(config / "discover_hosts.sh")

    def _keep_discovery(self) -> None:
        """getOrCreateConfigMap on every sync (:869-905): the Running workers (:834-852), sorted by name; with
        ``api``, the kubelet's status of each worker pod too."""
        last = None
        while not self._stop.wait(1.0):
            running = sorted(w for w in self.workers if w in self.pods.pods and self._running(w))
            if running != last:
                self._write_discovery(self.config_dir, [self._fqdn(w) for w in running])
                last = running
            if self.api is not None:
                for worker in self.workers:
                    self._report(worker)

    def _report(self, worker: str) -> None:
        """The worker pod's phase (restartPolicy Never: a stopped container is Succeeded or Failed) and readiness:
        its container's TCP readiness probe passes (checked until it does), or it has none."""
        try:
            state = self.pods.state(worker)
        except (subprocess.CalledProcessError, ValueError, KeyError):  # podman busy: no news now
            return
        if state["Status"] in ("exited", "stopped"):
            self.api.report(worker, "Succeeded" if state["ExitCode"] == 0 else "Failed", False)
            return
        container = self.job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        port = container.get("readinessProbe", {}).get("tcpSocket", {}).get("port")
        if port is None or worker in self._ready_pods or self.pods.listening(worker, port):
            self._ready_pods.add(worker)
        self.api.report(worker, "Running", worker in self._ready_pods)

    def _running(self, pod: str) -> bool:
        try:
            return self.pods.state(pod)["Status"] == "running"
        except (subprocess.CalledProcessError, ValueError, KeyError):  # gone, or podman busy: not Running now
            return False

    def _pod(self, role: str, hostname: str) -> tuple[dict, dict, dict[str, str]]:
        """The pod spec, its first container and the env the operator appends, for ``role``'s template."""
        replica = self.job["spec"]["mpiReplicaSpecs"][role]
        pod = copy.deepcopy(replica["template"]["spec"])
        pod["hostname"], pod["subdomain"] = hostname, self.name  # :1486-1487, :1574-1575
        pod["restartPolicy"] = "Never" if replica["restartPolicy"] == "ExitCode" else replica["restartPolicy"]
        container = pod["containers"][0]
        if role == "Worker":
            search = f"{self.name}.{self.namespace}.svc.cluster.local"  # :1494-1499
            pod.setdefault("dnsConfig", {}).setdefault("searches", []).append(search)
            if not container.get("command") and not container.get("args"):
                container["command"] = ["/usr/sbin/sshd", "-De"]  # :1503-1505
            env = {"K_MPI_JOB_ROLE": "worker"}  # workerEnvVars, :1506
        else:
            env = {"K_MPI_JOB_ROLE": "launcher",  # launcherEnvVars, :1584
                   # ompiEnvVars and openMPISlotsEnv, :1587-1592
                   "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
                   "OMPI_MCA_orte_default_hostfile": f"{CONFIG_MOUNT}/hostfile",
                   "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
                   "OMPI_MCA_orte_set_default_slots": str(self.job["spec"]["slotsPerWorker"]),
                   # nvidiaDisableEnvVars, :1603-1609 (no value: empty)
                   "NVIDIA_VISIBLE_DEVICES": "", "NVIDIA_DRIVER_CAPABILITIES": ""}
        return pod, container, env

    def _start(self, role: str, hostname: str) -> str:
        pod, container, env = self._pod(role, hostname)
        mounts = {self.job["spec"]["sshAuthMountPath"]: self.ssh_dir}
        if role == "Launcher":
            mounts[CONFIG_MOUNT] = self.config_dir
        hosts = None
        if self.api is not None:
            if role == "Worker":  # the Pod the operator creates (:1016), still Pending
                index = self.workers.index(hostname)
                self.api.create(hostname, {"metadata": {"labels": worker_labels(self.job, index)}, "spec": pod},
                                self.name)
            env, mounts, hosts = {**env, **self.api.env}, {**mounts, **self.api.mounts}, self.api.hosts
        return self.pods.start(hostname, self.name, pod, container, extra_env=env, mounts=mounts, claims=self.claims,
                               hosts=hosts)

    def start_workers(self) -> None:
        """getOrCreateWorker (:976-1036); the discovery ConfigMap (and with ``api`` the pods' status) kept current
        from here on."""
        for worker in self.workers:
            self._start("Worker", worker)
        self._discovery.start()

    def wait_workers_ready(self) -> None:
        """Every worker pod Ready: its readiness probe's TCP check passes (the kubelet's prober), or, without a
        probe, its container started (a pod is Ready then)."""
        container = self.job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        port = container.get("readinessProbe", {}).get("tcpSocket", {}).get("port")
        for worker in self.workers:
            if port is not None:
                self.pods.wait_port(worker, port)

    @property
    def suspended(self) -> bool:
        return bool(self.job["spec"]["runPolicy"].get("suspend"))  # isMPIJobSuspended

    def run(self, timeout_s: float) -> int | None:
        """The whole job: workers, then the launcher (at once, or once the workers are Ready), retried as its Job's
        backoffLimit allows; the launcher's last exit code (None: still running at the timeout, or suspended)."""
        if self.suspended:  # :665 no workers; :1547 the launcher Job suspended: nothing runs
            return None
        self.start_workers()
        if self.job["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady":
            self.wait_workers_ready()
        return self.run_launcher(timeout_s)

    def run_launcher(self, timeout_s: float) -> int | None:
        backoff = self.job["spec"]["runPolicy"].get("backoffLimit", 6)  # the Job API's default backoffLimit
        deadline = time.monotonic() + timeout_s
        failures, code = 0, None
        while True:
            hostname = self.launcher
            self._start("Launcher", hostname)
            self.launcher_pods.append(self.pods.pods[hostname])
            code = self.pods.wait(hostname, max(1.0, deadline - time.monotonic()))
            if code != 0 and code is not None and failures < backoff:
                failures += 1
                self.pods.rename_stopped(hostname, f"{hostname}-try{failures}")
                continue
            return code

    def close(self) -> None:
        self._stop.set()
        if self._discovery.is_alive():  # its last report done before the API server goes
            self._discovery.join(60)

