"""Rendered Indexed Jobs (the indexed-job backend's, and the Job of a TrainJob's JobSet) that run as the Job
controller runs them: every pod a container of the built training image.

The indexed-job manifest is the backend's; a TrainJob's pods are those of the JobSet Trainer's controller makes of
the rendered TrainJob (tests/trainer_controller.py: the runtime's template, the PET_* variables, JobSet's names).
What the Job controller does with either is tests/job_controller.py; the pods run with podman on a network whose
DNS answers ``<hostname>.<subdomain>`` (tests/pod_containers.py), as the image's own non-root user.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from job_controller import IndexedJob
from kueue_controller import admit_job, admit_trainjob, webhook_default_trainjob
from pod_containers import CLAIM, JOB_TIMEOUT_S, NAMESPACE, config_map_folder, json_events
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from trainer_controller import jobset_for, pods_of

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.kubernetes import sharded
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState
from airflow_ml_provider.runtime.shards import MARKER, records

pytestmark = pytest.mark.integration


def _torch_spec(image: str, **fields) -> TrainingJobSpec:
    return TrainingJobSpec(**{
        "framework": "pytorch", "num_workers": 2, "image": image, "model_dir": "/work/model",
        "checkpoint_dir": "/work/checkpoints", "env": {"OMP_NUM_THREADS": "1"}, "kubernetes": {"volumes": [CLAIM]},
        "command": ["python", "-m", "airflow_ml_provider.runtime.torch_ddp", "--epochs", "2"], **fields})


def _binary_splits(claims) -> None:
    """train.npz and valid.npz on the job's volume: a binary task a few trees learn (AUC well above 0.8)."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(2400, 8))
    y = (X[:, 0] + 0.5 * X[:, 1] - X[:, 2] * X[:, 3] + rng.normal(scale=0.5, size=len(X)) > 0).astype(np.float64)
    np.savez(claims["work"] / "train.npz", X=X[:2000], y=y[:2000])
    np.savez(claims["work"] / "valid.npz", X=X[2000:], y=y[2000:])


def _assert_ddp_trained(logs: dict[str, str], node0: str, claims) -> None:
    """Both ranks (one per pod) trained as one group: the same final weights; pod ``node0`` is rank 0."""
    checksums = {e["rank"]: e["checksum"] for log in logs.values() for e in json_events(log)
                 if e.get("event") == "weights_checksum"}
    assert sorted(checksums) == [0, 1] and len(set(checksums.values())) == 1, {h: v[-3000:] for h, v in logs.items()}
    assert [e["rank"] for e in json_events(logs[node0]) if e.get("event") == "weights_checksum"] == [0]
    assert (claims["work"] / "model" / "model.pt").stat().st_size > 0


def test_indexed_job_lightgbm_trains_in_the_image(tmp_path, training_image, network, claims):
    _binary_splits(claims)
    spec = TrainingJobSpec(
        framework="lightgbm", num_workers=2, image=training_image, model_dir="/work/model",
        env={"OMP_NUM_THREADS": "1"}, kubernetes={"volumes": [CLAIM]}, scheduling={"gang": False},
        command=["python", "-m", "airflow_ml_provider.runtime.lightgbm_trainer", "--train-data", "/work/train.npz",
                 "--valid-data", "/work/valid.npz", "--num-boost-round", "20", "--params-json", '{"num_leaves": 7}'])
    job, service = get_backend("indexed-job", api_client=None, namespace=NAMESPACE).manifests("lgb", spec, {})
    assert job["spec"]["template"]["spec"]["subdomain"] == service["metadata"]["name"]
    controller = IndexedJob("lgb", job["spec"], network, claims)
    assert controller.run(JOB_TIMEOUT_S) == "Complete", {h: network.logs(h)[-3000:] for h in network.pods}
    results = [e for e in json_events(network.logs("lgb-0")) if e.get("event") == "result"]
    assert results and results[-1]["num_trees"] == 20 and results[-1]["auc"] > 0.8
    assert '"event": "result"' not in network.logs("lgb-1"), "index 1 must not act as rank 0"
    assert (claims["work"] / "model" / "model.txt").exists()


def test_indexed_job_pytorch_meets_at_pod_0_and_trains_in_the_image(tmp_path, training_image, network, claims):
    job, service = get_backend("indexed-job", api_client=None, namespace=NAMESPACE).manifests(
        "ddp", _torch_spec(training_image, scheduling={"gang": False}), {})
    controller = IndexedJob("ddp", job["spec"], network, claims)
    # pod 1 first: it waits at the rendezvous for pod 0
    assert controller.run(JOB_TIMEOUT_S, order=[1, 0]) == "Complete", {h: network.logs(h)[-3000:] for h in network.pods}
    _assert_ddp_trained({h: network.logs(h) for h in ("ddp-0", "ddp-1")}, "ddp-0", claims)


def test_trainjob_pods_take_trainers_numbering_and_train_in_the_image(tmp_path, training_image, network, claims):
    (trainjob,) = get_backend("trainjob", api_client=None, namespace=NAMESPACE).manifests(
        "ddp", _torch_spec(training_image), {})
    jobset = jobset_for({**trainjob, "metadata": {**trainjob["metadata"], "uid": "0"}})
    pods = pods_of(jobset)
    assert [pod["hostname"] for pod in pods] == ["ddp-node-0-0", "ddp-node-0-1"]
    (replicated,) = jobset["spec"]["replicatedJobs"]
    job_spec = replicated["template"]["spec"]
    assert job_spec["template"]["spec"]["restartPolicy"] == "Never" and job_spec["backoffLimit"] == 0  # F6
    # the JobSet's Job <jobset>-<replicated job>-0; its pods' subdomain the JobSet's
    controller = IndexedJob(f"ddp-{replicated['name']}-0", job_spec, network, claims, subdomain=pods[0]["subdomain"])
    assert controller.run(JOB_TIMEOUT_S, order=[1, 0]) == "Complete", {h: network.logs(h)[-3000:] for h in network.pods}
    _assert_ddp_trained({h: network.logs(h) for h in ("ddp-node-0-0", "ddp-node-0-1")}, "ddp-node-0-0", claims)


def test_a_crashing_indexed_job_pod_fails_the_job_without_a_retry(tmp_path, training_image, network, claims):
    """backoffLimit 0 (the provider's default) and restartPolicy Never: one failed pod fails the Job, no new pod."""
    spec = TrainingJobSpec(framework="generic", num_workers=1, image=training_image, kubernetes={"volumes": [CLAIM]},
                           scheduling={"gang": False},
                           command=["python", "-m", "airflow_ml_provider.runtime.preprocess", "--input",
                                    "/work/missing.npz", "--output", "/work/out.npz"])
    job, _ = get_backend("indexed-job", api_client=None, namespace=NAMESPACE).manifests("crash", spec, {})
    controller = IndexedJob("crash", job["spec"], network, claims)
    assert controller.run(JOB_TIMEOUT_S) == "Failed"
    assert controller.failures == 1 and len(controller.pod_names[0]) == 1


def test_indexed_job_xgboost_trains_with_the_tracker_beside_pod_0_in_the_image(tmp_path, training_image, network,
                                                                                claims):
    """Issue 42: the bundled XGBoost trainer on 2 pods, pod 1 started first (its gate waits for the tracker that pod 0
    serves at its stable name); rank 0 (completion index 0) reports and saves the model."""
    _binary_splits(claims)
    spec = TrainingJobSpec(
        framework="xgboost", num_workers=2, image=training_image, model_dir="/work/model",
        checkpoint_dir="/work/checkpoints", kubernetes={"volumes": [CLAIM]}, scheduling={"gang": False},
        command=["python", "-m", "airflow_ml_provider.runtime.xgboost_trainer", "--train-data", "/work/train.npz",
                 "--valid-data", "/work/valid.npz", "--num-boost-round", "20", "--checkpoint-every", "10"])
    job, _ = get_backend("indexed-job", api_client=None, namespace=NAMESPACE).manifests("xgb", spec, {})
    controller = IndexedJob("xgb", job["spec"], network, claims)
    assert controller.run(JOB_TIMEOUT_S, order=[1, 0]) == "Complete", {h: network.logs(h)[-3000:] for h in network.pods}
    results = [e for e in json_events(network.logs("xgb-0")) if e.get("event") == "result"]
    assert results and results[-1]["num_trees"] == 20 and results[-1]["auc"] > 0.8, network.logs("xgb-0")[-3000:]
    assert '"event": "result"' not in network.logs("xgb-1"), "index 1 must not act as rank 0"
    assert (claims["work"] / "model" / "model.ubj").exists()
    _assert_checkpoints_and_tensorboard(claims["work"] / "checkpoints")


def test_trainjob_xgboost_runs_a_users_script_with_trainers_dmlc_variables_in_the_image(tmp_path, training_image,
                                                                                       network, claims):
    """Issue 42: a TrainJob on the provider's xgboost runtime; its JobSet's pods get their DMLC_* from Trainer's
    xgboost plugin (the tracker at <job>-node-0-0.<job>:29500, the task id the completion index), the gate serves
    the tracker on node 0, and the user's own CommunicatorContext script runs unchanged; pod 1 starts first. Both
    workers end with the same model."""
    script = claims["work"] / "user_script.py"
    script.write_bytes((Path(__file__).parents[2] / "fixtures" / "xgboost" / "user_script.py").read_bytes())
    spec = TrainingJobSpec(framework="xgboost", num_workers=2, image=training_image, kubernetes={"volumes": [CLAIM]},
                           command=["python", "/work/user_script.py", "--out", "/work", "--rounds", "5"])
    (trainjob,) = get_backend("trainjob", api_client=None, namespace=NAMESPACE).manifests("xgb", spec, {})
    jobset = jobset_for({**trainjob, "metadata": {**trainjob["metadata"], "uid": "0"}})
    pods = pods_of(jobset)
    (replicated,) = jobset["spec"]["replicatedJobs"]
    job_spec = replicated["template"]["spec"]
    assert job_spec["template"]["spec"]["restartPolicy"] == "Never" and job_spec["backoffLimit"] == 0
    controller = IndexedJob(f"xgb-{replicated['name']}-0", job_spec, network, claims, subdomain=pods[0]["subdomain"])
    assert controller.run(JOB_TIMEOUT_S, order=[1, 0]) == "Complete", {h: network.logs(h)[-3000:] for h in network.pods}
    assert "xgboost tracker listening on 0.0.0.0:29500 for 2 workers" in network.logs("xgb-node-0-0")
    assert "rank=1 world=2 task_id=1 " in network.logs("xgb-node-0-1")
    models = [(claims["work"] / f"model-{rank}.json").read_bytes() for rank in (0, 1)]
    assert models[0] == models[1] and len(models[0]) > 1000


def test_restarts_in_place_fail_an_on_failure_job_once_they_reach_its_backoff_limit(tmp_path, training_image, network,
                                                                                      claims):
    """The Job controller's rule for restartPolicy OnFailure (job_controller.go:1446-1469, as tests/job_controller.py
    cites it), which a TrainJob on Trainer's stock runtimes gets from JobSet: the kubelet restarts a crashed container
    in place, and the Job fails as soon as its pods' restarts reach backoffLimit. The pod crashes on its first run
    only; with backoffLimit 1 its one restart fails the Job, although that second run would have succeeded."""
    once = ("import pathlib, sys, time\nruns = pathlib.Path('/work/runs')\n"
            "runs.write_text((runs.read_text() if runs.exists() else '') + 'x')\n"
            "sys.exit(1) if len(runs.read_text()) == 1 else time.sleep(20)")
    spec = TrainingJobSpec(framework="generic", num_workers=1, image=training_image, kubernetes={"volumes": [CLAIM]},
                           scheduling={"gang": False}, command=["python", "-c", once])
    job, _ = get_backend("indexed-job", api_client=None, namespace=NAMESPACE).manifests("once", spec, {})
    job["spec"]["template"]["spec"]["restartPolicy"], job["spec"]["backoffLimit"] = "OnFailure", 1
    controller = IndexedJob("once", job["spec"], network, claims)
    assert controller.run(JOB_TIMEOUT_S) == "Failed", network.logs("once-0")[-2000:]  # before the 20 s were up
    assert network.restarts("once-0") >= 1  # (the killed second run may be restarted too, or not have begun)


def test_a_kueue_indexed_job_runs_nothing_until_admitted_then_runs(tmp_path, training_image, network, claims):
    """queueing kueue on indexed-job: the Job is submitted suspended with its LocalQueue label; the Job controller
    makes no pod of a suspended Job; Kueue's admission (tests/kueue_controller.py: RunWithPodSetsInfo of its
    batch/Job integration) unsuspends it with the flavor's node selector, and the same Job runs."""
    rng = np.random.default_rng(4)
    np.savez(claims["work"] / "raw.npz", X=rng.normal(size=(20, 2)) * 10, y=np.zeros(20))
    spec = TrainingJobSpec(framework="generic", num_workers=1, image=training_image, kubernetes={"volumes": [CLAIM]},
                           scheduling={"queue": "team-a", "gang": False},
                           command=["python", "-m", "airflow_ml_provider.runtime.preprocess", "--input",
                                    "/work/raw.npz", "--output", "/work/clean.npz"])
    backend = get_backend("indexed-job", api_client=None, namespace=NAMESPACE, queueing="kueue")
    job, _ = yaml.safe_load_all(backend.render("queued", spec, {}))
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert IndexedJob("queued", job["spec"], network, claims).run(JOB_TIMEOUT_S) is None
    assert network.pods == {}, "a suspended Job has no pod"
    admitted = admit_job(job, node_selector={"pool": "spot"})
    assert admitted["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "spot"}
    assert IndexedJob("queued", admitted["spec"], network, claims).run(JOB_TIMEOUT_S) == "Complete"
    assert (claims["work"] / "clean.npz").exists()


def test_a_kueue_trainjob_runs_nothing_until_admitted_then_trains(tmp_path, training_image, network, claims):
    """queueing kueue on trainjob: the TrainJob is submitted suspended with its LocalQueue label, Kueue's webhook adds
    its runtime patch; Trainer's JobSet of a suspended TrainJob and its Job are suspended, so no pod runs. Kueue's
    admission fills its patch with the flavor's node selector and unsuspends it; Trainer merges the patch into the
    JobSet's pods, which train (an XGBoost user's script on Trainer's DMLC_* variables)."""
    script = claims["work"] / "user_script.py"
    script.write_bytes((Path(__file__).parents[2] / "fixtures" / "xgboost" / "user_script.py").read_bytes())
    spec = TrainingJobSpec(framework="xgboost", num_workers=2, image=training_image, kubernetes={"volumes": [CLAIM]},
                           scheduling={"queue": "team-a"},
                           command=["python", "/work/user_script.py", "--out", "/work", "--rounds", "3"])
    backend = get_backend("trainjob", api_client=None, namespace=NAMESPACE, queueing="kueue")
    (trainjob,) = yaml.safe_load_all(backend.render("qx", spec, {}))
    assert trainjob["spec"]["suspend"] is True
    assert trainjob["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    queued = webhook_default_trainjob({**trainjob, "metadata": {**trainjob["metadata"], "uid": "0"}})

    def run(job: dict) -> tuple[str | None, dict]:
        jobset = jobset_for(job)
        (replicated,) = jobset["spec"]["replicatedJobs"]
        controller = IndexedJob(f"qx-{replicated['name']}-0", replicated["template"]["spec"], network, claims,
                                subdomain=pods_of(jobset)[0]["subdomain"])
        return controller.run(JOB_TIMEOUT_S), replicated["template"]["spec"]["template"]

    assert run(queued)[0] is None and network.pods == {}, "a suspended TrainJob has no pod"
    phase, pod = run(admit_trainjob(queued, node_selector={"pool": "spot"}))
    # the pods' logs as text: a dict's repr is cut in the middle in pytest's report, where the error was
    assert phase == "Complete", "\n".join(f"--- {h}\n{network.logs(h)[-3000:]}" for h in network.pods)
    assert pod["spec"]["nodeSelector"] == {"pool": "spot"}
    models = [(claims["work"] / f"model-{rank}.json").read_bytes() for rank in (0, 1)]
    assert models[0] == models[1]


def _assert_checkpoints_and_tensorboard(checkpoints) -> None:
    """Rank 0's two boosters, and beside them its 20 rounds as TensorBoard scalars (AIRFLOW_ML_TENSORBOARD_DIR,
    which job_env gives every pod), one event file, as tensorboard's reader parses it."""
    assert sorted(p.name for p in checkpoints.iterdir()) == ["booster-000010.json", "booster-000020.json",
                                                             "tensorboard"]
    assert len(list((checkpoints / "tensorboard").iterdir())) == 1, "not rank 0's writer alone"
    accumulator = EventAccumulator(str(checkpoints / "tensorboard"))
    accumulator.Reload()
    assert {"loss", "auc"} <= set(accumulator.Tags()["scalars"])
    assert [event.step for event in accumulator.Scalars("auc")] == list(range(1, 21))


def test_trainjob_runs_the_bundled_xgboost_trainer_in_the_image(tmp_path, training_image, network, claims):
    """The pipeline's XGBoost job (the bundled trainer) on a TrainJob's pods: rank 0, Trainer's DMLC_TASK_ID 0 on
    node 0, reports and saves the model, checkpoints every 10 rounds."""
    _binary_splits(claims)
    spec = TrainingJobSpec(
        framework="xgboost", num_workers=2, image=training_image, model_dir="/work/model",
        checkpoint_dir="/work/checkpoints", kubernetes={"volumes": [CLAIM]},
        command=["python", "-m", "airflow_ml_provider.runtime.xgboost_trainer", "--train-data", "/work/train.npz",
                 "--valid-data", "/work/valid.npz", "--num-boost-round", "20", "--checkpoint-every", "10"])
    (trainjob,) = get_backend("trainjob", api_client=None, namespace=NAMESPACE).manifests("xgb", spec, {})
    jobset = jobset_for({**trainjob, "metadata": {**trainjob["metadata"], "uid": "0"}})
    (replicated,) = jobset["spec"]["replicatedJobs"]
    controller = IndexedJob(f"xgb-{replicated['name']}-0", replicated["template"]["spec"], network, claims,
                            subdomain=pods_of(jobset)[0]["subdomain"])
    assert controller.run(JOB_TIMEOUT_S, order=[1, 0]) == "Complete", {h: network.logs(h)[-3000:] for h in network.pods}
    results = [e for e in json_events(network.logs("xgb-node-0-0")) if e.get("event") == "result"]
    assert results and results[-1]["num_trees"] == 20 and results[-1]["auc"] > 0.8
    assert '"event": "result"' not in network.logs("xgb-node-0-1"), "node 1 must not act as rank 0"
    assert (claims["work"] / "model" / "model.ubj").exists()
    _assert_checkpoints_and_tensorboard(claims["work"] / "checkpoints")


# A shard's program: it reads its inputs (ids, a line each), writes them to its output, counts its rows, and notes each
# run in /work/runs; the shard whose /work/slow-<index> exists sleeps until its pod is killed.
SHARD_PROGRAM = """
import json, os, pathlib, time, uuid
index = os.environ["AIRFLOW_ML_SHARD_INDEX"]
(pathlib.Path("/work/runs") / f"{index}-{uuid.uuid4().hex[:8]}").write_text(os.environ["AIRFLOW_ML_SHARD_ATTEMPT"])
time.sleep(120 if pathlib.Path(f"/work/slow-{index}").exists() else 1)
rows = [line for path in json.loads(os.environ["AIRFLOW_ML_SHARD_INPUTS"]) for line in open(path).read().split()]
out = pathlib.Path(os.environ["AIRFLOW_ML_SHARD_OUTPUT"])
(out / "rows.txt").write_text("\\n".join(rows) + "\\n")
(out / "_ROWS").write_text(str(len(rows)))
"""


@pytest.mark.parametrize("per_index", [True, False], ids=["backoffLimitPerIndex", "pod-side-retry"])
def test_a_sharded_job_of_12_shards_on_3_pods_commits_each_once_with_a_killed_shard_rerun(tmp_path, training_image,
                                                                                         network, claims, per_index):
    """Issue 43: the indexed-job rendering of a sharded job runs as the Job controller runs it (tests/job_controller.py:
    3 pods at once for 12 completions, a new pod for a failed one's index, with backoffLimitPerIndex or by the global
    backoffLimit). Shard 4's pod is killed mid-run (podman kill): its index gets a new pod, which re-runs it; every
    shard ends committed exactly once (each input row once in the outputs), and the result says so. A second Job over
    the same output skips every shard."""
    work = claims["work"]
    (work / "data").mkdir()
    for i in range(12):
        (work / "data" / f"part-{i:02d}.txt").write_text("".join(f"id-{i}-{r}\n" for r in range(5)))
    (work / "runs").mkdir(mode=0o777)
    (work / "runs").chmod(0o777)
    (work / "slow-4").write_text("")
    spec = TrainingJobSpec(framework="generic", num_workers=3, image=training_image, model_dir="/work/model",
                           kubernetes={"volumes": [CLAIM]}, scheduling={"gang": False},
                           command=["python", "-c", SHARD_PROGRAM],
                           shards={"count": 12, "output": "/work/model/shards", "max_attempts": 3,
                                   "inputs": [[f"/work/data/part-{i:02d}.txt"] for i in range(12)]})
    backend = get_backend("indexed-job", api_client=None, namespace=NAMESPACE, per_index_retries=per_index)
    job, plan = backend.manifests("score", spec, {})
    assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (12, 3)
    folder = config_map_folder(plan, tmp_path / "plan")
    killed: list[str] = []

    def kill_shard_4(controller: IndexedJob) -> None:
        runs = [p.name for p in (work / "runs").iterdir() if p.name.startswith("4-")]
        if runs and not killed:
            network.kill("score-4")  # mid-run: it sleeps while /work/slow-4 exists
            killed.append(runs[0])
            (work / "slow-4").unlink()

    controller = IndexedJob("score", job["spec"], network, claims, uid="job-uid-1", config_maps={"score": folder})
    end = controller.run(JOB_TIMEOUT_S, on_tick=kill_shard_4)
    assert end == "Complete", {h: network.logs(h)[-2000:] for h in network.pods}
    assert killed and controller.max_active == 3
    assert len(controller.pod_names[4]) == 2 and all(len(controller.pod_names[i]) == 1 for i in range(12) if i != 4)
    runs = sorted(p.name.split("-")[0] for p in (work / "runs").iterdir())
    assert runs == sorted([str(i) for i in range(12)] + ["4"]), "every shard ran once, the killed one twice"
    shards_out = work / "model" / "shards"
    assert sorted(p.name for p in shards_out.glob("shard-*")) == [f"shard-{i:06d}" for i in range(12)]
    rows = [line for i in range(12) for line in (shards_out / f"shard-{i:06d}" / "rows.txt").read_text().split()]
    assert sorted(rows) == sorted(f"id-{i}-{r}" for i in range(12) for r in range(5)), "no row missing or twice"
    assert not list((shards_out / ".tmp").iterdir()), "the killed try's files are gone"
    attempt = json.loads((shards_out / "shard-000004" / MARKER).read_text())["attempt"]
    assert attempt == (2 if per_index else 1), "per index: the rerun is the index's second try (failure count 1)"
    ran = {"metadata": {"uid": controller.uid, "annotations": job["metadata"]["annotations"]}, "status": controller.status}
    assert sharded.result(ran, *records(str(shards_out))) == {
        "shards": 12, "shards_done": 12, "shards_ran": 12, "shards_skipped": 0, "shards_retried": 1 if per_index else 0,
        "shards_failed": 0, "failed_shards": [], "rows": 60}

    for host in list(network.pods):  # a resubmitted job: a new Job (uid) over the same output
        network.rename_stopped(host, f"first-{host}")
    again = IndexedJob("score", job["spec"], network, claims, uid="job-uid-2", config_maps={"score": folder})
    assert again.run(JOB_TIMEOUT_S) == "Complete"
    assert len(list((work / "runs").iterdir())) == 13, "no shard ran again"
    assert "shard 7: committed already; skipped" in network.logs("score-7")
    rerun = {"metadata": {"uid": again.uid, "annotations": job["metadata"]["annotations"]}, "status": again.status}
    assert sharded.result(rerun, *records(str(shards_out)))["shards_skipped"] == 12


FAILING_SHARD = ("import os, pathlib, sys\nindex = os.environ['AIRFLOW_ML_SHARD_INDEX']\n"
                 "sys.exit(f'shard {index} cannot be read') if index == '2' else "
                 "pathlib.Path(os.environ['AIRFLOW_ML_SHARD_OUTPUT'], 'done').write_text(index)")


@pytest.mark.parametrize("per_index", [True, False], ids=["backoffLimitPerIndex", "pod-side-retry"])
@pytest.mark.parametrize("max_failed", [1, 0])
def test_a_shard_that_fails_every_try_fails_the_job_unless_max_failed_shards_allows_it(tmp_path, training_image,
                                                                                      network, claims, per_index,
                                                                                      max_failed):
    """Shard 2 of 4 fails each of its max_attempts (2) tries: with max_failed_shards 1 the job succeeds listing it
    (per index: the Job ends Failed/FailedIndexes, which is the provider's success; the pod-side retry records it and
    the Job completes); with 0 the job fails (MaxFailedIndexesExceeded; or the pods exit 1 until backoffLimit)."""
    spec = TrainingJobSpec(framework="generic", num_workers=2, image=training_image, model_dir="/work/model",
                           kubernetes={"volumes": [CLAIM]}, scheduling={"gang": False},
                           command=["python", "-c", FAILING_SHARD],
                           shards={"count": 4, "output": "/work/model/shards", "max_attempts": 2,
                                   "max_failed_shards": max_failed})
    backend = get_backend("indexed-job", api_client=None, namespace=NAMESPACE, per_index_retries=per_index)
    (job,) = backend.manifests("flaky", spec, {})
    controller = IndexedJob("flaky", job["spec"], network, claims, uid="job-uid-9")
    controller.run(JOB_TIMEOUT_S)
    state = backend.job_status({**job, "status": controller.status}).state
    logs = {h: network.logs(h)[-1500:] for h in network.pods}
    runs_of_2 = [h for h in network.pods if h == "flaky-2" or h.startswith("flaky-2-try")]
    if max_failed:
        assert state is JobState.SUCCEEDED, (controller.reason, logs)
        assert controller.reason == ("FailedIndexes" if per_index else "")
        out = claims["work"] / "model" / "shards"
        result = sharded.result({**job, "metadata": {**job["metadata"], "uid": controller.uid},
                                 "status": controller.status}, *records(str(out)))
        assert (result["shards_done"], result["failed_shards"], result["shards_failed"]) == (3, [2], 1)
        assert len(runs_of_2) == (2 if per_index else 1), "per index: a pod a try; else the pod's own retry"
        assert "shard 2: try 2 of 2 failed" in network.logs("flaky-2")
    else:
        assert state is JobState.FAILED, (controller.reason, logs)
        assert controller.reason == ("MaxFailedIndexesExceeded" if per_index else "BackoffLimitExceeded")
