"""Rendered jobs that actually run: each Kubernetes backend's manifest, executed as its pods would.

MPIJobs run as containers of the built training image instead (tests/integration/images/test_mpijob_runs.py,
tests/mpi_operator.py); the rest move there as their controllers' stand-ins are written.

For indexed-job and volcano, the test renders the manifest with the backend
(``get_backend(...).manifests``; for trainjob, the JobSet that Trainer's controller makes of the stored
TrainJob: tests/trainer_controller.py) and starts every pod's container, with its command, env and
workingDir exactly as rendered, as a real process here (tests/pod_sandbox.py). The local training
environment (``AIRFLOW_ML_LOCAL_IMAGE``, .venv-train) stands in for the container image: first on the
image's PATH, as /opt/venv is in images/training/Dockerfile. Artifacts go under tmp_path.

What the test supplies is only what the cluster would, each with the upstream source that does it:

- a pod's network: its own network namespace with one address on a bridge (a CNI bridge plugin);
  its hostname (the controller sets ``spec.hostname``) in its own UTS namespace;
- name resolution: a per-pod hosts file bind-mounted on /etc/hosts, holding what the kubelet writes
  there (the pod's own FQDN) and the peers' names that cluster DNS answers for the job's headless
  Service (``<hostname>.<subdomain>`` via the ``<ns>.svc.cluster.local`` search path). The host's own
  /etc/hosts is never touched (the mount is private to the pod's mount namespace);
- the kubelet's ``$(VAR)`` expansion of command and args, and the downward API's ``fieldRef`` values;
- volcano's pytorch plugin: ``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``RANK`` (plugins/distributed-
  framework/pytorch/pytorch.go ``OnPodCreate``);
- indexed-job: ``JOB_COMPLETION_INDEX`` and hostname ``<job>-<index>`` (kubernetes
  pkg/controller/job/indexed_job_utils.go ``addCompletionIndexEnvVariable``; job_controller.go
  ``manageJob``: ``template.Spec.Hostname = fmt.Sprintf("%s-%d", job.Name, completionIndex)``);
- volcano: hostname ``<job>-<task>-<i>``, subdomain ``<job>``, ``/etc/volcano/<task>.host`` and
  ``VC_<TASK>_HOSTS``/``VC_<TASK>_NUM`` (volcano-sh/volcano pkg/controllers/job/plugins/svc/svc.go
  ``OnPodCreate``, ``GenerateHosts``); ``VC_TASK_INDEX``/``VK_TASK_INDEX`` (plugins/env/env.go
  ``OnPodCreate``); the job's SSH key, authorized_keys and ssh ``config`` at /root/.ssh
  (plugins/ssh/ssh.go ``mountRsaKey``, ``generateRsaKey``, ``generateSSHConfig``);
- the image's sshd setup, as images/training/Dockerfile makes it (host keys, ``StrictModes no``,
  ``SetEnv PATH``, the client's ``StrictHostKeyChecking no``), in a copy bind-mounted on /etc/ssh.

Workers are started before their launcher, as Volcano's gang does. Needs root (namespaces) and Debian's openssh-server/client (scripts/install_sshd.sh).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from kube_cluster import resource_path
from pod_sandbox import Cluster, can_run, can_ssh, container_env, image_ssh_dir, ssh_key_dir
from trainer_controller import jobset_for, pods_of

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from support import needs_torch

pytestmark = pytest.mark.integration

NAMESPACE = "ml"
JOB_TIMEOUT_S = 300


@pytest.fixture
def image() -> str:
    image = os.environ.get("AIRFLOW_ML_LOCAL_IMAGE")
    if not image or not Path(image, "bin", "python").exists():
        pytest.skip("AIRFLOW_ML_LOCAL_IMAGE (the training environment standing in for the image) is not set")
    return image


@pytest.fixture
def cluster(tmp_path):
    if reason := can_run():
        pytest.skip(f"pod sandbox: {reason}")
    pods = Cluster(NAMESPACE)
    yield pods
    pods.close()


@pytest.fixture
def ssh_image(tmp_path, image, cluster) -> Path:
    """The image's /etc/ssh, and its /run/sshd (``mkdir -p /run/sshd`` in the Dockerfile)."""
    if reason := can_ssh():
        pytest.skip(reason)
    cluster.mount_point("/run/sshd")
    return image_ssh_dir(tmp_path / "image-root", image)


def _binary_data(directory: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(7)
    X = rng.normal(size=(2400, 8))
    y = (X[:, 0] + 0.5 * X[:, 1] - X[:, 2] * X[:, 3] + rng.normal(scale=0.5, size=len(X)) > 0).astype(np.float64)
    train, valid = directory / "train.npz", directory / "valid.npz"
    np.savez(train, X=X[:2000], y=y[:2000])
    np.savez(valid, X=X[2000:], y=y[2000:])
    return train, valid


def _lightgbm_spec(tmp_path: Path, image: str) -> TrainingJobSpec:
    train, valid = _binary_data(tmp_path)
    return TrainingJobSpec(
        framework="lightgbm", num_workers=2, image=image, model_dir=str(tmp_path / "model"),
        working_dir=str(tmp_path), env={"OMP_NUM_THREADS": "1"},
        command=["python", "-m", "airflow_ml_provider.runtime.lightgbm_trainer", "--train-data", str(train),
                 "--valid-data", str(valid), "--num-boost-round", "20", "--params-json", '{"num_leaves": 7}'],
    )


def _wait_all(procs: dict[str, subprocess.Popen], logs: dict[str, Path]) -> None:
    for name, proc in procs.items():
        try:
            code = proc.wait(JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
        assert code == 0, f"pod {name} exited {code}:\n{logs[name].read_text()[-4000:]}"


def _events(log: Path) -> list[dict]:
    """The trainer's JSON lines, without the ``[<rank>]<stdout>:`` that horovodrun puts before a rank's lines."""
    lines = (line.partition("<stdout>:")[2] if line.startswith("[") else line for line in log.read_text().splitlines())
    return [json.loads(line) for line in lines if line.startswith('{"')]


def _result(log: Path) -> dict:
    results = [e for e in _events(log) if e.get("event") == "result"]
    assert results, f"no result line in {log}:\n{log.read_text()[-3000:]}"
    return results[-1]


def test_indexed_job_lightgbm_trains(tmp_path, image, cluster):
    spec = _lightgbm_spec(tmp_path, image)
    job, service = get_backend("indexed-job", api_client=None, namespace=NAMESPACE).manifests("lgb", spec, {})
    template = job["spec"]["template"]
    (container,) = template["spec"]["containers"]
    subdomain = template["spec"]["subdomain"]
    assert subdomain == service["metadata"]["name"], "pods must be under the job's headless Service"
    hostnames = [f"lgb-{index}" for index in range(job["spec"]["completions"])]
    for hostname in hostnames:
        cluster.add_pod(hostname, subdomain)
    procs, logs = {}, {}
    for index, hostname in enumerate(hostnames):
        logs[hostname] = tmp_path / f"{hostname}.log"
        # JOB_COMPLETION_INDEX: kubernetes pkg/controller/job/indexed_job_utils.go addCompletionIndexEnvVariable
        procs[hostname] = cluster.start(hostname, container, image=image, workdir=tmp_path, log=logs[hostname],
                                        extra_env={"JOB_COMPLETION_INDEX": str(index)}, mounts={})
    _wait_all(procs, logs)
    result = _result(logs["lgb-0"])
    assert result["num_trees"] == 20 and result["auc"] > 0.8, result
    assert (tmp_path / "model" / "model.txt").exists()
    assert '"event": "result"' not in logs["lgb-1"].read_text(), "index 1 must not act as rank 0"
    machines = container_env(container)["AIRFLOW_ML_MACHINES"]
    assert machines.startswith("lgb-0.lgb:"), machines  # the peers really were reached by these names


def _horovod_spec(tmp_path: Path, image: str) -> TrainingJobSpec:
    return TrainingJobSpec(
        framework="horovod", num_workers=2, image=image, model_dir=str(tmp_path / "model"),
        working_dir=str(tmp_path), env={"OMP_NUM_THREADS": "1"},
        command=["python", "-m", "airflow_ml_provider.runtime.horovod_keras", "--epochs", "1"],
    )


def _volcano_pods(job: dict) -> list[tuple[str, dict, int]]:
    """(hostname, task, index) of every pod: ``<job>-<task>-<i>`` (volcano-sh/volcano
    pkg/controllers/job/helpers/helpers.go ``MakePodName``, which svc.go ``OnPodCreate`` makes the hostname)."""
    name = job["metadata"]["name"]
    return [(f"{name}-{task['name']}-{i}", task, i) for task in job["spec"]["tasks"] for i in range(task["replicas"])]


def _volcano_svc(job: dict, directory: Path) -> tuple[Path, dict[str, str]]:
    """The svc plugin's ConfigMap (mounted on /etc/volcano) and the env it injects from it
    (plugins/svc/svc.go ``GenerateHosts``: ``<task>.host`` one host a line, ``VC_<TASK>_HOSTS``, ``VC_<TASK>_NUM``)."""
    name = job["metadata"]["name"]
    data = {}
    for task in job["spec"]["tasks"]:
        hosts = [f"{name}-{task['name']}-{i}.{name}" for i in range(task["replicas"])]
        key = task["name"].replace("-", "_")
        data[f"{key}.host"] = "\n".join(hosts)
        data[f"VC_{key.upper()}_HOSTS"] = ",".join(hosts)
        data[f"VC_{key.upper()}_NUM"] = str(len(hosts))
    directory.mkdir()
    for key, value in data.items():
        (directory / key).write_text(value)
    return directory, {k: v for k, v in data.items() if k.startswith("VC_")}


def _volcano_ssh_config(job: dict) -> str:
    """plugins/ssh/ssh.go ``generateSSHConfig`` with the default port 22."""
    name, config = job["metadata"]["name"], "StrictHostKeyChecking no\nUserKnownHostsFile /dev/null\n"
    for hostname, _, _ in _volcano_pods(job):
        config += f"Host {hostname}\n  HostName {hostname}.{name}\n  Port 22\n"
    return config


def _run_volcano(job: dict, tmp_path: Path, image: str, cluster: Cluster, ssh_etc: Path | None = None) -> dict:
    """Start every task's pods as the Volcano controller would (servers first), wait; the logs by hostname."""
    name, plugins = job["metadata"]["name"], job["spec"]["plugins"]
    pods = _volcano_pods(job)
    for hostname, _, _ in pods:
        cluster.add_pod(hostname, name)  # svc plugin: subdomain = job name
    hosts_dir, svc_env = _volcano_svc(job, tmp_path / "volcano-svc")
    mounts = {"/etc/volcano": hosts_dir}
    if "ssh" in plugins:  # plugins/ssh/ssh.go mountRsaKey: the job's Secret at /root/.ssh
        mounts["/root/.ssh"] = ssh_key_dir(tmp_path / "volcano-ssh", ["-t", "rsa", "-b", "2048"], _volcano_ssh_config(job))
        mounts["/etc/ssh"] = ssh_etc
    procs, logs = {}, {}
    servers = [pod for pod in pods if pod[1]["template"]["spec"]["containers"][0]["command"][0].endswith("sshd")]
    for hostname, task, index in servers + [pod for pod in pods if pod not in servers]:
        if servers and (hostname, task, index) not in servers:
            for server, _, _ in servers:
                cluster.wait_port(server, 22)
        (container,) = task["template"]["spec"]["containers"]
        extra = dict(svc_env)
        if "env" in plugins:  # plugins/env/env.go OnPodCreate
            extra.update(VK_TASK_INDEX=str(index), VC_TASK_INDEX=str(index))
        if "pytorch" in plugins:
            extra.update(_volcano_pytorch_env(job, task, index))
        logs[hostname] = tmp_path / f"{hostname}.log"
        procs[hostname] = cluster.start(hostname, container, image=image, workdir=tmp_path, log=logs[hostname],
                                        extra_env=extra, mounts=mounts)
    server_names = {hostname for hostname, _, _ in servers}  # sshd runs until the job is torn down
    _wait_all({h: proc for h, proc in procs.items() if h not in server_names}, logs)
    return logs


def _volcano_pytorch_env(job: dict, task: dict, index: int) -> dict[str, str]:
    """What the pytorch plugin appends to each container (plugins/distributed-framework/pytorch/pytorch.go
    ``OnPodCreate``, ``generateMasterAddr``, ``getTotalReplicas``), from its arguments."""
    args = {"master": "master", "worker": "worker", "port": "23456"}
    args.update(arg.lstrip("-").split("=", 1) for arg in job["spec"]["plugins"]["pytorch"])
    name, roles = job["metadata"]["name"], (args["master"], args["worker"])
    size = sum(t["replicas"] for t in job["spec"]["tasks"] if t["name"] in roles)
    rank = 0 if task["name"] == args["master"] else index + 1
    return {"MASTER_ADDR": f"{name}-{args['master']}-0.{name}", "MASTER_PORT": args["port"],
            "WORLD_SIZE": str(size), "RANK": str(rank)}


def test_volcano_lightgbm_trains(tmp_path, image, cluster):
    spec = _lightgbm_spec(tmp_path, image)
    (job,) = get_backend("volcano", api_client=None, namespace=NAMESPACE).manifests("lgb", spec, {})
    assert set(job["spec"]["plugins"]) == {"svc", "env"}
    logs = _run_volcano(job, tmp_path, image, cluster)
    result = _result(logs["lgb-worker-0"])
    assert result["num_trees"] == 20 and result["auc"] > 0.8, result
    assert '"event": "result"' not in logs["lgb-worker-1"].read_text(), "VC_TASK_INDEX 1 must not act as rank 0"


def test_volcano_horovod_trains(tmp_path, image, cluster, ssh_image):
    (job,) = get_backend("volcano", api_client=None, namespace=NAMESPACE).manifests(
        "hvd", _horovod_spec(tmp_path, image), {})
    assert set(job["spec"]["plugins"]) == {"svc", "ssh"}
    logs = _run_volcano(job, tmp_path, image, cluster, ssh_image)
    _assert_horovod_trained(logs["hvd-master-0"], tmp_path)
    for worker in ("hvd-worker-0", "hvd-worker-1"):  # the ranks ran there, started over ssh with the job's key
        assert "Accepted publickey for root" in logs[worker].read_text(), logs[worker].read_text()[-2000:]


def _assert_horovod_trained(launcher_log: Path, tmp_path: Path) -> None:
    """Both ranks ran (on the workers, over ssh) and ended with the same weights; rank 0 saved the model."""
    assert _result(launcher_log)["accuracy"] > 0.5
    checksums = {e["rank"]: e["checksum"] for e in _events(launcher_log) if e.get("event") == "weights_checksum"}
    assert sorted(checksums) == [0, 1] and len(set(checksums.values())) == 1, checksums
    assert (tmp_path / "model" / "model.keras").stat().st_size > 0


def _torch_spec(tmp_path: Path, image: str, **fields) -> TrainingJobSpec:
    return TrainingJobSpec(**{
        "framework": "pytorch", "num_workers": 2, "image": image, "model_dir": str(tmp_path / "model"),
        "checkpoint_dir": str(tmp_path / "checkpoints"), "working_dir": str(tmp_path), "env": {"OMP_NUM_THREADS": "1"},
        "command": ["python", "-m", "airflow_ml_provider.runtime.torch_ddp", "--epochs", "2"], **fields})


def _assert_ddp_trained(logs: dict[str, Path], node0: str, tmp_path: Path) -> None:
    """Both ranks (one per pod) trained as one group: the same final weights; node 0 (pod ``node0``) is
    rank 0, which reported the test result and saved the model."""
    events = {pod: _events(log) for pod, log in logs.items()}
    checksums = {e["rank"]: e["checksum"] for pod_events in events.values() for e in pod_events
                 if e.get("event") == "weights_checksum"}
    assert sorted(checksums) == [0, 1] and len(set(checksums.values())) == 1, checksums
    assert [e["rank"] for e in events[node0] if e.get("event") == "weights_checksum"] == [0]
    assert _result(logs[node0])["accuracy"] > 0.5
    assert (tmp_path / "model" / "model.pt").stat().st_size > 0


@needs_torch
def test_indexed_job_pytorch_meets_at_pod_0_and_trains(tmp_path, image, cluster):
    job, service = get_backend("indexed-job", api_client=None, namespace=NAMESPACE).manifests(
        "ddp", _torch_spec(tmp_path, image), {})
    template = job["spec"]["template"]
    (container,) = template["spec"]["containers"]
    assert container["command"][0] == "torchrun" and "--tee" not in container["command"]
    assert service["spec"]["ports"][0]["port"] == 29400  # the rendezvous port, on pod 0
    hostnames = [f"ddp-{index}" for index in range(job["spec"]["completions"])]
    for hostname in hostnames:
        cluster.add_pod(hostname, template["spec"]["subdomain"])
    procs, logs = {}, {}
    for index, hostname in reversed(list(enumerate(hostnames))):  # pod 1 first: it waits at the rendezvous
        logs[hostname] = tmp_path / f"{hostname}.log"
        procs[hostname] = cluster.start(hostname, container, image=image, workdir=tmp_path, log=logs[hostname],
                                        extra_env={"JOB_COMPLETION_INDEX": str(index)}, mounts={})
    _wait_all(procs, logs)
    _assert_ddp_trained(logs, "ddp-0", tmp_path)


@needs_torch
def test_volcano_pytorch_takes_the_pytorch_plugins_numbering_and_trains(tmp_path, image, cluster):
    (job,) = get_backend("volcano", api_client=None, namespace=NAMESPACE).manifests(
        "ddp", _torch_spec(tmp_path, image), {})
    assert set(job["spec"]["plugins"]) == {"pytorch", "svc"}
    assert [(t["name"], t["replicas"]) for t in job["spec"]["tasks"]] == [("master", 1), ("worker", 1)]
    command = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["command"]
    assert "$(MASTER_ADDR)" in command and "$(RANK)" in command  # the kubelet fills in the plugin's values
    logs = _run_volcano(job, tmp_path, image, cluster)
    _assert_ddp_trained(logs, "ddp-master-0", tmp_path)


@needs_torch
def test_trainjob_pods_take_trainers_numbering_and_train(tmp_path, image, cluster, trainer_cluster, namespace):
    """The TrainJob as the API server stored it, the JobSet Trainer's controller makes of it (accepted by
    JobSet's CRD, read back), and its pods as JobSet and the Job controller make them: torchrun takes the
    torch plugin's PET_* variables (node rank from the completion index, by the downward API)."""
    jobs = get_backend("trainjob", api_client=trainer_cluster.api_client(), namespace=namespace)
    jobs.submit("ddp", _torch_spec(tmp_path, image, working_dir=None), {})
    trainer_cluster.request("POST", resource_path("jobset.x-k8s.io/v1alpha2", "JobSet", namespace),
                            jobset_for(jobs.get("TrainJob", "ddp")))
    jobset = trainer_cluster.request("GET", resource_path("jobset.x-k8s.io/v1alpha2", "JobSet", namespace, "ddp"))
    pods = pods_of(jobset)
    assert [pod["hostname"] for pod in pods] == ["ddp-node-0-0", "ddp-node-0-1"]
    for pod in pods:
        cluster.add_pod(pod["hostname"], pod["subdomain"])
    procs, logs = {}, {}
    for pod in reversed(pods):  # node 1 first: it waits for node 0's store
        hostname = pod["hostname"]
        logs[hostname] = tmp_path / f"{hostname}.log"
        procs[hostname] = cluster.start(hostname, pod["container"], image=image, workdir=tmp_path, log=logs[hostname],
                                        extra_env=pod["env"], fields=pod["fields"], mounts={})
    _wait_all(procs, logs)
    _assert_ddp_trained(logs, "ddp-node-0-0", tmp_path)
