"""Rendered jobs that actually run: each Kubernetes backend's manifest, executed as its pods would.

For indexed-job, volcano and mpijob, the test renders the manifest with the backend
(``get_backend(...).manifests``) and starts every pod's container, with its command, env and
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
- indexed-job: ``JOB_COMPLETION_INDEX`` and hostname ``<job>-<index>`` (kubernetes
  pkg/controller/job/indexed_job_utils.go ``addCompletionIndexEnvVariable``; job_controller.go
  ``manageJob``: ``template.Spec.Hostname = fmt.Sprintf("%s-%d", job.Name, completionIndex)``);
- volcano: hostname ``<job>-<task>-<i>``, subdomain ``<job>``, ``/etc/volcano/<task>.host`` and
  ``VC_<TASK>_HOSTS``/``VC_<TASK>_NUM`` (volcano-sh/volcano pkg/controllers/job/plugins/svc/svc.go
  ``OnPodCreate``, ``GenerateHosts``); ``VC_TASK_INDEX``/``VK_TASK_INDEX`` (plugins/env/env.go
  ``OnPodCreate``); the job's SSH key, authorized_keys and ssh ``config`` at /root/.ssh
  (plugins/ssh/ssh.go ``mountRsaKey``, ``generateRsaKey``, ``generateSSHConfig``);
- mpijob: hostnames ``<job>-launcher``/``<job>-worker-<i>``, subdomain ``<job>``, ``/etc/mpi/hostfile``
  (``<host>.<job>.<ns>.svc slots=<n>``) and ``discover_hosts.sh``, the launcher's ``OMPI_MCA_*``,
  ``K_MPI_JOB_ROLE`` and NVIDIA-disabling env, the job's ECDSA key at /root/.ssh as id_rsa, id_rsa.pub
  and authorized_keys (kubeflow/mpi-operator pkg/controller/mpi_job_controller.go ``newConfigMap``,
  ``updateDiscoverHostsInConfigMap``, ``newLauncherPodTemplate``, ``newWorker``, ``newSSHAuthSecret``,
  ``setupSSHOnPod``);
- the image's sshd setup, as images/training/Dockerfile makes it (host keys, ``StrictModes no``,
  ``SetEnv PATH``, the client's ``StrictHostKeyChecking no``), in a copy bind-mounted on /etc/ssh.

Workers are started before their launcher, as the MPI operator's ``WaitForWorkersReady`` and
Volcano's gang do. Needs root (namespaces) and Debian's openssh-server/client (scripts/install_sshd.sh).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from pod_sandbox import Cluster, can_run, container_env

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.spec import TrainingJobSpec

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


def _result(log: Path) -> dict:
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith('{"')]
    results = [e for e in events if e.get("event") == "result"]
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
