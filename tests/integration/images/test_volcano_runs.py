"""Rendered Volcano Jobs that run as Volcano runs them: every pod a container of the built training image.

The manifest is the volcano backend's; what Volcano's job controller and its svc, ssh, env and pytorch plugins
make of it, and how its policies end it, is tests/volcano_controller.py (each step citing Volcano's code); the pods
run with podman on a network whose DNS answers ``<pod>.<job>`` (tests/pod_containers.py).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from kube_cluster import TRAINER_TOKEN
from pod_api import PodApi
from pod_containers import CLAIM, JOB_TIMEOUT_S, NAMESPACE, PodNetwork, json_events
from volcano_controller import VolcanoController

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.spec import TrainingJobSpec

pytestmark = pytest.mark.integration


def _run(name: str, spec: TrainingJobSpec, network: PodNetwork, tmp_path: Path, claims) -> tuple[VolcanoController, str]:
    (job,) = get_backend("volcano", api_client=None, namespace=NAMESPACE).manifests(name, spec, {})
    controller = VolcanoController(job, network, tmp_path / "controller", claims)
    return controller, controller.run(JOB_TIMEOUT_S)


def _lightgbm_spec(image: str, claims, **fields) -> TrainingJobSpec:
    rng = np.random.default_rng(7)
    X = rng.normal(size=(2400, 8))
    y = (X[:, 0] + 0.5 * X[:, 1] - X[:, 2] * X[:, 3] + rng.normal(scale=0.5, size=len(X)) > 0).astype(np.float64)
    np.savez(claims["work"] / "train.npz", X=X[:2000], y=y[:2000])
    np.savez(claims["work"] / "valid.npz", X=X[2000:], y=y[2000:])
    return TrainingJobSpec(**{
        "framework": "lightgbm", "num_workers": 2, "image": image, "model_dir": "/work/model",
        "env": {"OMP_NUM_THREADS": "1"}, "kubernetes": {"volumes": [CLAIM]},
        "command": ["python", "-m", "airflow_ml_provider.runtime.lightgbm_trainer", "--train-data", "/work/train.npz",
                    "--valid-data", "/work/valid.npz", "--num-boost-round", "20", "--params-json", '{"num_leaves": 7}'],
        **fields})


def test_volcano_lightgbm_trains_in_the_image(tmp_path, training_image, network, claims):
    controller, phase = _run("lgb", _lightgbm_spec(training_image, claims), network, tmp_path, claims)
    logs = {h: network.logs(h) for h, _, _ in controller.pod_specs}
    assert phase == "Completed", logs
    results = [e for e in json_events(logs["lgb-worker-0"]) if e.get("event") == "result"]
    assert results and results[-1]["num_trees"] == 20 and results[-1]["auc"] > 0.8, logs["lgb-worker-0"][-3000:]
    assert '"event": "result"' not in logs["lgb-worker-1"], "VC_TASK_INDEX 1 must not act as rank 0"
    assert (claims["work"] / "model" / "model.txt").exists()


def test_volcano_horovod_trains_in_the_image(tmp_path, training_image, network, claims):
    spec = TrainingJobSpec(framework="horovod", num_workers=2, image=training_image, model_dir="/work/model",
                           env={"OMP_NUM_THREADS": "1"}, kubernetes={"volumes": [CLAIM]},
                           command=["python", "-m", "airflow_ml_provider.runtime.horovod_keras", "--epochs", "1"])
    controller, phase = _run("hvd", spec, network, tmp_path, claims)
    master = network.logs("hvd-master-0")
    assert phase == "Completed", master[-4000:]  # the master's TaskCompleted -> CompleteJob
    checksums = {e["rank"]: e["checksum"] for e in json_events(master) if e.get("event") == "weights_checksum"}
    assert sorted(checksums) == [0, 1] and len(set(checksums.values())) == 1, checksums
    assert (claims["work"] / "model" / "model.keras").stat().st_size > 0
    for worker in ("hvd-worker-0", "hvd-worker-1"):  # the ranks ran there, over ssh with the plugin's key
        assert "Accepted publickey for root" in network.logs(worker), network.logs(worker)[-2000:]


def test_volcano_pytorch_takes_the_plugins_numbering_and_trains_in_the_image(tmp_path, training_image, network,
                                                                              claims):
    spec = TrainingJobSpec(framework="pytorch", num_workers=2, image=training_image, model_dir="/work/model",
                           checkpoint_dir="/work/checkpoints", env={"OMP_NUM_THREADS": "1"},
                           kubernetes={"volumes": [CLAIM]},
                           command=["python", "-m", "airflow_ml_provider.runtime.torch_ddp", "--epochs", "2"])
    controller, phase = _run("ddp", spec, network, tmp_path, claims)
    logs = {h: network.logs(h) for h, _, _ in controller.pod_specs}
    assert phase == "Completed", {h: log[-3000:] for h, log in logs.items()}
    checksums = {e["rank"]: e["checksum"] for log in logs.values() for e in json_events(log)
                 if e.get("event") == "weights_checksum"}
    assert sorted(checksums) == [0, 1] and len(set(checksums.values())) == 1, checksums
    assert [e["rank"] for e in json_events(logs["ddp-master-0"]) if e.get("event") == "weights_checksum"] == [0]
    assert (claims["work"] / "model" / "model.pt").stat().st_size > 0


def test_volcano_generic_job_completes_when_every_pod_succeeds(tmp_path, training_image, network, claims):
    """A generic job (the pipeline's preprocessing, one shard a pod by VC_TASK_INDEX) has no TaskCompleted policy:
    the job completes once every pod succeeded (state/running.go:78-105)."""
    rng = np.random.default_rng(3)
    for index in range(2):
        np.savez(claims["work"] / f"raw-{index}.npz", X=rng.normal(size=(30, 3)) * 10, y=np.zeros(30))
    shard = ["python", "-c", "import os, runpy, sys; i = os.environ['VC_TASK_INDEX']; "
             "sys.argv = ['preprocess', '--input', f'/work/raw-{i}.npz', '--output', f'/work/clean-{i}.npz', '--clip', '2']; "
             "runpy.run_module('airflow_ml_provider.runtime.preprocess', run_name='__main__')"]
    spec = TrainingJobSpec(framework="generic", num_workers=2, image=training_image, kubernetes={"volumes": [CLAIM]},
                           command=shard)
    controller, phase = _run("prep", spec, network, tmp_path, claims)
    assert phase == "Completed", {h: network.logs(h)[-2000:] for h, _, _ in controller.pod_specs}
    for index in range(2):
        with np.load(claims["work"] / f"clean-{index}.npz") as clean:
            assert np.abs(clean["X"]).max() <= 2


def test_a_crashing_volcano_trainer_aborts_the_job_instead_of_looping(tmp_path, training_image, network, claims):
    """Issue 39 F3, run: restartPolicy Never makes the crash a Failed pod, whose PodFailed -> AbortJob ends the job
    (under OnFailure the pod restarted in place, CrashLoopBackOff, and the job stayed Running)."""
    spec = _lightgbm_spec(training_image, claims, command=[
        "python", "-m", "airflow_ml_provider.runtime.lightgbm_trainer", "--train-data", "/work/missing.npz",
        "--valid-data", "/work/valid.npz"])
    controller, phase = _run("crash", spec, network, tmp_path, claims)
    assert phase == "Aborted" and controller.retries == 0
    assert all(network.restarts(h) == 0 for h, _, _ in controller.pod_specs)


def test_volcano_runs_a_users_xgboost_script_with_the_tracker_beside_worker_0(tmp_path, training_image, network,
                                                                               claims):
    """Issue 42: the user's own CommunicatorContext script, unchanged, on 2 pods: the tracker beside worker 0 at the
    svc plugin's name, DMLC_TASK_ID the env plugin's VC_TASK_INDEX; both workers end with the same model."""
    script = claims["work"] / "user_script.py"
    script.write_bytes((Path(__file__).parents[2] / "fixtures" / "xgboost" / "user_script.py").read_bytes())
    spec = TrainingJobSpec(framework="xgboost", num_workers=2, image=training_image, kubernetes={"volumes": [CLAIM]},
                           command=["python", "/work/user_script.py", "--out", "/work", "--rounds", "5"])
    controller, phase = _run("xgb", spec, network, tmp_path, claims)
    logs = {h: network.logs(h) for h, _, _ in controller.pod_specs}
    assert phase == "Completed", {h: log[-3000:] for h, log in logs.items()}
    assert "xgboost tracker listening on 0.0.0.0:9091 for 2 workers" in logs["xgb-worker-0"]
    assert "rank=1 world=2 task_id=1 " in logs["xgb-worker-1"]
    models = [(claims["work"] / f"model-{rank}.json").read_bytes() for rank in (0, 1)]
    assert models[0] == models[1] and len(models[0]) > 1000


def test_a_crashing_volcano_trainer_with_backoff_limit_runs_backoff_limit_plus_one_times(tmp_path, training_image,
                                                                                       network, claims):
    """kubernetes.backoff_limit 1 (F4, run): PodFailed -> RestartJob, maxRetry 2; the second crash's restart brings
    the retries to maxRetry and the job fails: two runs of its pods, as the backend promises."""
    spec = _lightgbm_spec(training_image, claims, kubernetes={"volumes": [CLAIM], "backoff_limit": 1}, command=[
        "python", "-m", "airflow_ml_provider.runtime.lightgbm_trainer", "--train-data", "/work/missing.npz",
        "--valid-data", "/work/valid.npz"])
    controller, phase = _run("retry", spec, network, tmp_path, claims)
    assert controller.job["spec"]["maxRetry"] == 2
    assert phase == "Failed" and controller.retries == 2 and len(controller.runs) == 2


def test_elastic_volcano_horovod_loses_a_worker_container_mid_run_and_finishes_on_the_rest(tmp_path, training_image,
                                                                                          network, claims, api_server):
    """Issue 39, elastic Horovod on Volcano, run: max_workers worker pods, min_workers of them in the gang; the
    master's horovodrun finds the workers by listing the job's Running worker pods from the API server
    (runtime.pod_discovery, with a service account granted only `list pods`: tests/pod_api.py makes the pods Pod
    objects and reports their phase). One worker's container is killed mid-run: its rank is gone, Horovod drops
    its host, and the ring goes on with the other two to the last step; the master's TaskCompleted completes the
    job."""
    total = 200
    spec = TrainingJobSpec(framework="horovod", num_workers=3, min_workers=1, max_workers=3, image=training_image,
                           checkpoint_dir="/work/checkpoints", env={"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"},
                           kubernetes={"volumes": [CLAIM]},
                           command=["python", "-m", "airflow_ml_provider.runtime.horovod_elastic", "--total-steps",
                                    str(total)])
    # render: the manifests with the job-name label the pod discovery selects by
    (job,) = yaml.safe_load_all(get_backend("volcano", api_client=None, namespace=NAMESPACE).render("ela", spec, {}))
    workers = next(task for task in job["spec"]["tasks"] if task["name"] == "worker")
    assert (workers["replicas"], workers["minAvailable"], job["spec"]["minAvailable"]) == (3, 1, 2)
    api_server.grant(NAMESPACE, "trainer", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}])
    api = PodApi(api_server, NAMESPACE, network, tmp_path / "kubelet", TRAINER_TOKEN)
    controller = VolcanoController(job, network, tmp_path / "controller", claims, api=api)
    outcome = {}
    runner = threading.Thread(target=lambda: outcome.update(phase=controller.run(JOB_TIMEOUT_S + 300)))
    try:
        runner.start()
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while time.monotonic() < deadline and runner.is_alive() and not ("ela-master-0" in network.pods and any(
                # 3 workers in the ring, 10 steps trained on them
                e.get("event") == "metrics" and e.get("workers") == 3 and e.get("step", 0) >= 10
                for e in json_events(network.logs("ela-master-0")))):
            time.sleep(2)
        sizes = [e.get("workers") for e in json_events(network.logs("ela-master-0")) if e.get("event") == "metrics"]
        network.kill("ela-worker-1")
        runner.join(JOB_TIMEOUT_S + 330)
    finally:
        if runner.is_alive():  # the master still runs: stop it, so that the thread ends before the network goes
            network.kill("ela-master-0")
            runner.join(60)
        api.close()
    master = network.logs("ela-master-0")
    assert outcome.get("phase") == "Completed", master[-5000:]
    events = json_events(master)
    changes = [e for e in events if e.get("event") == "membership"]
    assert any((c["previous_size"], c["size"]) == (3, 2) for c in changes), (changes, sizes)
    [result] = [e for e in events if e.get("event") == "result"]
    assert result["steps"] == total and result["workers"] == 2, result
