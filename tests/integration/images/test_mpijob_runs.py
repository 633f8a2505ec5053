"""Rendered MPIJobs that run as the MPI operator runs them: every pod a container of the built training image.

The manifest is the mpijob backend's (``get_backend("mpijob").manifests``); what kubeflow/mpi-operator v0.8.0 makes
of it (its Secret, ConfigMap, worker pods and launcher Job, each step citing the operator's code) is
tests/mpi_operator.py, and the pods run with podman on a network whose DNS answers each pod's
``<hostname>.<job>.<ns>.svc`` name (tests/pod_containers.py). Nothing of the host's environment is in a pod: the
image's Python, Horovod, sshd and ssh do everything, as the pod's user. The job's volume is a folder standing for
its PersistentVolumeClaim, writable by the image's user.

These replace the process-level pod runs (tests/pod_sandbox.py) the suite had before.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from kube_cluster import TRAINER_TOKEN
from kueue_controller import admit_mpijob
from mpi_operator import MPIOperator
from pod_api import PodApi
from pod_containers import CLAIM, JOB_TIMEOUT_S, NAMESPACE, PodNetwork, json_events

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from support import REPO

pytestmark = pytest.mark.integration


def _mpijob(name: str, spec: TrainingJobSpec) -> dict:
    (job,) = get_backend("mpijob", api_client=None, namespace=NAMESPACE).manifests(name, spec, {})
    return job


def _run(job: dict, network: PodNetwork, tmp_path: Path, claims: dict[str, Path]) -> tuple[MPIOperator, int | None]:
    operator = MPIOperator(job, network, tmp_path / "controller", claims)
    try:
        return operator, operator.run(JOB_TIMEOUT_S)
    finally:
        operator.close()


def test_mpijob_horovod_trains_in_the_image(tmp_path, training_image, network, claims):
    spec = TrainingJobSpec(framework="horovod", num_workers=2, image=training_image, model_dir="/work/model",
                           env={"OMP_NUM_THREADS": "1"}, kubernetes={"volumes": [CLAIM]},
                           command=["python", "-m", "airflow_ml_provider.runtime.horovod_keras", "--epochs", "1"])
    job = _mpijob("hvd", spec)
    operator, code = _run(job, network, tmp_path, claims)
    launcher = network.logs(operator.launcher)
    assert code == 0, f"launcher exited {code}:\n{launcher[-4000:]}"
    events = json_events(launcher)
    checksums = {e["rank"]: e["checksum"] for e in events if e.get("event") == "weights_checksum"}
    assert sorted(checksums) == [0, 1] and len(set(checksums.values())) == 1, checksums
    assert [e for e in events if e.get("event") == "result"][-1]["accuracy"] > 0.5
    assert (claims["work"] / "model" / "model.keras").stat().st_size > 0
    for worker in operator.workers:  # the ranks ran there, over ssh with the operator's key, as root
        assert "Accepted publickey for root" in network.logs(worker), network.logs(worker)[-2000:]


def test_mpijob_generic_preprocess_runs_in_the_image(tmp_path, training_image, network, claims):
    """The pipeline's generic job (its preprocessing shard) on mpijob: horovodrun's Gloo launcher starts the rank on
    the worker over ssh (the image has no MPI), and the cleaned shard lands on the job's volume."""
    rng = np.random.default_rng(3)
    np.savez(claims["work"] / "raw.npz", X=rng.normal(size=(50, 4)) * 10, y=rng.integers(0, 2, 50).astype(float))
    spec = TrainingJobSpec(framework="generic", num_workers=1, image=training_image, kubernetes={"volumes": [CLAIM]},
                           command=["python", "-m", "airflow_ml_provider.runtime.preprocess", "--input",
                                    "/work/raw.npz", "--output", "/work/clean.npz", "--clip", "3"])
    job = _mpijob("prep", spec)
    assert job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"][0] == "horovodrun"
    operator, code = _run(job, network, tmp_path, claims)
    launcher = network.logs(operator.launcher)
    assert code == 0, f"launcher exited {code}:\n{launcher[-4000:]}"
    with np.load(claims["work"] / "clean.npz") as clean:
        assert clean["X"].shape == (50, 4) and np.abs(clean["X"]).max() <= 3
    assert "Accepted publickey for root" in network.logs(operator.workers[0])


def test_mpijob_generic_evaluate_runs_in_the_image(tmp_path, training_image, network, claims):
    """The pipeline's other generic job on mpijob: its evaluation of a LightGBM model on held-out rows (the model
    trained here on the host's LightGBM, a file on the job's volume); the rank's result line reaches the launcher."""
    import lightgbm

    rng = np.random.default_rng(5)
    X = rng.normal(size=(600, 5))
    y = (X[:, 0] - X[:, 1] > 0).astype(float)
    booster = lightgbm.train({"objective": "binary", "verbose": -1, "num_threads": 1}, lightgbm.Dataset(X[:400], y[:400]),
                             num_boost_round=10)
    booster.save_model(str(claims["work"] / "model.txt"))
    np.savez(claims["work"] / "test.npz", X=X[400:], y=y[400:])
    spec = TrainingJobSpec(framework="generic", num_workers=1, image=training_image, kubernetes={"volumes": [CLAIM]},
                           command=["python", "-m", "airflow_ml_provider.runtime.evaluate", "--model",
                                    "/work/model.txt", "--test-data", "/work/test.npz"])
    operator, code = _run(_mpijob("eval", spec), network, tmp_path, claims)
    launcher = network.logs(operator.launcher)
    assert code == 0, f"launcher exited {code}:\n{launcher[-4000:]}"
    [result] = [e for e in json_events(launcher) if e.get("event") == "result"]
    assert result["rows"] == 200 and result["auc"] > 0.8, result


def test_a_failing_mpijob_launcher_fails_and_is_not_restarted_in_place(tmp_path, training_image, network, claims):
    """restartPolicy Never on the launcher, backoffLimit 0 (the provider's default): one launcher pod, exit non-zero."""
    spec = TrainingJobSpec(framework="generic", num_workers=1, image=training_image, kubernetes={"volumes": [CLAIM]},
                           command=["python", "-m", "airflow_ml_provider.runtime.preprocess", "--input",
                                    "/work/missing.npz", "--output", "/work/out.npz"])
    operator, code = _run(_mpijob("fail", spec), network, tmp_path, claims)
    assert code not in (0, None), network.logs(operator.launcher)[-3000:]
    assert len(operator.launcher_pods) == 1 and network.restarts(operator.launcher) == 0


def test_elastic_mpijob_loses_a_worker_container_mid_run_and_finishes_on_the_rest(tmp_path, training_image, network,
                                                                                 claims, api_server):
    """Elastic Horovod on MPIJob (F9, run): max_workers worker pods, the launcher at once (AtStartup), its horovodrun
    finding the workers by listing the job's Ready worker pods from the API server (runtime.pod_discovery, as a user
    holding exactly the Role of deploy/kubernetes/pod-discovery.yaml: tests/pod_api.py makes the pods Pod objects
    and reports their phase and readiness). One worker's container is killed mid-run; its pod is no longer Ready,
    the discovery stops listing it and the ring goes on without it to the last step."""
    total = 200
    spec = TrainingJobSpec(framework="horovod", num_workers=3, min_workers=1, max_workers=3, image=training_image,
                           checkpoint_dir="/work/checkpoints", env={"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"},
                           kubernetes={"volumes": [CLAIM], "service_account": "airflow-ml-launcher"},
                           command=["python", "-m", "airflow_ml_provider.runtime.horovod_elastic", "--total-steps",
                                    str(total)])
    job = _mpijob("ela", spec)
    assert job["spec"]["launcherCreationPolicy"] == "AtStartup" and job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
    launcher_pod = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    command = launcher_pod["containers"][0]["command"]
    discovery = command[command.index("--host-discovery-script") + 1]
    assert discovery.startswith("python -m airflow_ml_provider.runtime.pod_discovery --selector ")
    assert launcher_pod["serviceAccountName"] == "airflow-ml-launcher"
    shipped = yaml.safe_load_all((REPO / "deploy" / "kubernetes" / "pod-discovery.yaml").read_text())
    [role] = [doc for doc in shipped if doc["kind"] == "Role"]
    api_server.grant(NAMESPACE, "trainer", role["rules"])
    api = PodApi(api_server, NAMESPACE, network, tmp_path / "kubelet", TRAINER_TOKEN)
    operator = MPIOperator(job, network, tmp_path / "controller", claims, api=api)
    outcome = {}
    runner = threading.Thread(target=lambda: outcome.update(code=operator.run_launcher(JOB_TIMEOUT_S + 300)))
    try:
        operator.start_workers()  # and the launcher at once (AtStartup): the ring grows as the workers run
        runner.start()
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while time.monotonic() < deadline and not (operator.launcher in network.pods and any(
                # 3 workers in the ring, 10 steps trained on them
                e.get("event") == "metrics" and e.get("workers") == 3 and e.get("step", 0) >= 10
                for e in json_events(network.logs(operator.launcher)))):
            time.sleep(2)
        sizes = [e.get("workers") for e in json_events(network.logs(operator.launcher)) if e.get("event") == "metrics"]
        network.kill("ela-worker-1")
        runner.join(JOB_TIMEOUT_S + 330)
    finally:
        operator.close()
        if runner.is_alive():  # the launcher still runs: stop it, so that the thread ends before the network goes
            network.kill(operator.launcher)
            runner.join(60)
        api.close()
    launcher = network.logs(operator.launcher)
    assert outcome.get("code") == 0, f"launcher exited {outcome.get('code')}:\n{launcher[-5000:]}"
    events = json_events(launcher)
    changes = [e for e in events if e.get("event") == "membership"]
    assert any((c["previous_size"], c["size"]) == (3, 2) for c in changes), (changes, sizes)
    [result] = [e for e in events if e.get("event") == "result"]
    assert result["steps"] == total and result["workers"] == 2, result


def test_a_kueue_mpijob_runs_nothing_until_admitted_then_trains(tmp_path, training_image, network, claims):
    """queueing kueue: the MPIJob is submitted suspended and labelled with its LocalQueue; the operator makes no pod
    of it; Kueue's admission unsuspends it and the same job runs."""
    rng = np.random.default_rng(4)
    np.savez(claims["work"] / "raw.npz", X=rng.normal(size=(20, 2)) * 10, y=np.zeros(20))
    spec = TrainingJobSpec(framework="generic", num_workers=1, image=training_image, kubernetes={"volumes": [CLAIM]},
                           scheduling={"queue": "team-a"},
                           command=["python", "-m", "airflow_ml_provider.runtime.preprocess", "--input",
                                    "/work/raw.npz", "--output", "/work/clean.npz"])
    backend = get_backend("mpijob", api_client=None, namespace=NAMESPACE, queueing="kueue")
    (job,) = yaml.safe_load_all(backend.render("queued", spec, {}))
    assert job["spec"]["runPolicy"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert MPIOperator(job, network, tmp_path / "before", claims).run(JOB_TIMEOUT_S) is None
    assert network.pods == {}, "a suspended MPIJob has no pod"
    operator, code = _run(admit_mpijob(job), network, tmp_path, claims)
    assert code == 0, network.logs(operator.launcher)[-3000:]
    assert (claims["work"] / "clean.npz").exists()
