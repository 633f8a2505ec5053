"""Rendered jobs that actually run: the indexed-job and trainjob backends' pods, executed as processes.

MPIJobs and Volcano Jobs run as containers of the built training image instead (tests/integration/images/,
with tests/mpi_operator.py and tests/volcano_controller.py playing their controllers); these move there as the
Job controller's stand-in is written.

The test renders the manifest with the backend (``get_backend(...).manifests``; for trainjob, the JobSet that
Trainer's controller makes of the stored TrainJob: tests/trainer_controller.py) and starts every pod's container,
with its command, env and workingDir exactly as rendered, as a real process here (tests/pod_sandbox.py). The local
training environment (``AIRFLOW_ML_LOCAL_IMAGE``, .venv-train) stands in for the container image: first on the
image's PATH, as /opt/venv is in images/training/Dockerfile. Artifacts go under tmp_path.

What the test supplies is only what the cluster would, each with the upstream source that does it:

- a pod's network: its own network namespace with one address on a bridge (a CNI bridge plugin);
  its hostname (the controller sets ``spec.hostname``) in its own UTS namespace;
- name resolution: a per-pod hosts file bind-mounted on /etc/hosts, holding what the kubelet writes
  there (the pod's own FQDN) and the peers' names that cluster DNS answers for the job's headless
  Service (``<hostname>.<subdomain>`` via the ``<ns>.svc.cluster.local`` search path). The host's own
  /etc/hosts is never touched (the mount is private to the pod's mount namespace);
- the kubelet's ``$(VAR)`` expansion of command and args, and the downward API's ``fieldRef`` values;
- indexed-job: ``JOB_COMPLETION_INDEX`` and hostname ``<job>-<index>`` (kubernetes
  pkg/controller/job/indexed_job_utils.go ``addCompletionIndexEnvVariable``; job_controller.go
  ``manageJob``: ``template.Spec.Hostname = fmt.Sprintf("%s-%d", job.Name, completionIndex)``).

Needs root (namespaces).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from kube_cluster import resource_path
from pod_sandbox import Cluster, can_run, container_env
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
