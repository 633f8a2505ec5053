"""A sharded job on the indexed-job backend against the real kube-apiserver (tests/kube_cluster.py: Kubernetes
v1.20.2, older than Indexed Jobs and than backoffLimitPerIndex, so it drops completionMode, backoffLimitPerIndex and
maxFailedIndexes from a Job, as any server drops the fields it does not know)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kube_cluster import ApiError, resource_path

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.base import JobSubmissionError
from airflow_ml_provider.jobs.backends.kubernetes import sharded
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState

pytestmark = pytest.mark.integration

IDENTITY = JobIdentity("scoring", "score", "manual__2026-12-02T00:00:00+00:00")
# What the test server drops of a sharded Job: fields newer than it (completionMode 1.21 alpha, podFailurePolicy 1.25,
# the per-index ones 1.28)
NEWER_THAN_THE_SERVER = {"completionMode", "backoffLimitPerIndex", "maxFailedIndexes", "podFailurePolicy"}


def _spec(count: int = 40) -> TrainingJobSpec:
    return TrainingJobSpec(framework="generic", command=["python", "-m", "my_scorer", "--fast"], num_workers=4,
                           image="registry.example/score:1", model_dir="s3://bucket/model", scheduling={"gang": False},
                           kubernetes={"volumes": [{"name": "data", "mount_path": "/data", "claim": "datasets",
                                                    "read_only": True}]},
                           shards={"count": count, "output": "s3://bucket/model/shards", "max_attempts": 4,
                                   "max_failed_shards": 2,
                                   "inputs": [[f"s3://bucket/in/part-{i:05d}.parquet"] for i in range(count)]})


def _kept(rendered, stored, path: str = "") -> list[str]:
    """Where ``stored`` lacks or changed a value of ``rendered`` (the server's defaults it adds are fine)."""
    if isinstance(rendered, dict):
        return [miss for key, value in rendered.items() for miss in
                ([f"{path}.{key}"] if not isinstance(stored, dict) or key not in stored
                 else _kept(value, stored[key], f"{path}.{key}"))]
    if isinstance(rendered, list):
        if not isinstance(stored, list) or len(stored) != len(rendered):
            return [path]
        return [miss for i, (a, b) in enumerate(zip(rendered, stored)) for miss in _kept(a, b, f"{path}[{i}]")]
    return [] if rendered == stored else [path]


@pytest.mark.parametrize("per_index", [False, True], ids=["pod-side-retry", "backoffLimitPerIndex"])
def test_a_sharded_jobs_indexed_job_and_plan_are_accepted_and_kept(kube_cluster, namespace, per_index):
    """Submitted as for a 1.22-1.28 cluster (the pods retry) and for 1.29+ (backoffLimitPerIndex): the server keeps
    every field it knows: completions, parallelism, backoffLimit, the pods' command, downward-API variables and plan
    volume, the plan annotation; the plan ConfigMap is stored with one line per shard and owned by the Job."""
    backend = get_backend("indexed-job", api_client=kube_cluster.api_client(), namespace=namespace,
                          per_index_retries=per_index)
    name = IDENTITY.name
    rendered_job, rendered_plan = backend.manifests(name, _spec(), {**IDENTITY.labels(),
                                                                     "ml.airflow.apache.org/job-name": name})
    assert backend.submit(name, _spec(), IDENTITY.labels()) is True
    job = backend.get("Job", name)
    dropped = {path.split(".")[2] for path in _kept(rendered_job, job)}
    assert dropped == NEWER_THAN_THE_SERVER & set(rendered_job["spec"]), _kept(rendered_job, job)
    assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (40, 4)
    assert ("backoffLimit" in rendered_job["spec"]) is not per_index
    if not per_index:
        assert job["spec"]["backoffLimit"] == 16  # max_attempts 4 per pod that runs at once
    (worker,) = job["spec"]["template"]["spec"]["containers"]
    assert worker["command"][:3] == ["python", "-m", "airflow_ml_provider.runtime.shard_pod"]
    assert worker["command"][worker["command"].index("--") + 1:] == ["python", "-m", "my_scorer", "--fast"]
    uid_label = job["spec"]["template"]["metadata"]["labels"]["controller-uid"]
    assert uid_label == job["metadata"]["uid"], "the label the pods' AIRFLOW_ML_JOB_UID reads on this server"
    plan = backend.get("ConfigMap", name, "v1")
    assert not _kept(rendered_plan["data"], plan["data"])
    assert len(plan["data"][sharded.PLAN_KEY].splitlines()) == 40
    assert plan["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert json.loads(job["metadata"]["annotations"][sharded.PLAN_ANNOTATION])["max_failed_shards"] == 2
    backend.delete(name)
    with pytest.raises(ApiError):
        kube_cluster.request("GET", resource_path("v1", "ConfigMap", namespace, name))


def test_asked_its_version_the_test_server_is_too_old_for_a_sharded_job_and_says_so(kube_cluster, namespace):
    """per_index_retries unset: the backend reads /version (v1.20.2 here) and refuses, since the server would drop
    completionMode and run 40 pods with no completion index."""
    assert kube_cluster.request("GET", "/version")["minor"].rstrip("+") == "20"
    backend = get_backend("indexed-job", api_client=kube_cluster.api_client(), namespace=namespace)
    with pytest.raises(JobSubmissionError, match=r"^shards: the cluster's Kubernetes v1\.20\.\d+ has no Indexed Jobs"):
        backend.submit(IDENTITY.name, _spec(), IDENTITY.labels())
    with pytest.raises(ApiError):
        kube_cluster.request("GET", resource_path("batch/v1", "Job", namespace, IDENTITY.name))


def test_the_plans_1_mib_bound_is_the_api_servers(kube_cluster, namespace):
    """A ConfigMap of exactly 1 MiB of data is stored; one byte more is refused by the server itself, which is where
    the backend refuses a plan (naming shards.inputs) before sending anything."""
    def config_map(name: str, size: int) -> dict:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                "data": {sharded.PLAN_KEY: "x" * size}}

    path = resource_path("v1", "ConfigMap", namespace)
    kube_cluster.request("POST", path, config_map("fits", sharded.CONFIGMAP_MAX_BYTES))
    with pytest.raises(ApiError) as refused:
        kube_cluster.request("POST", path, config_map("over", sharded.CONFIGMAP_MAX_BYTES + 1))
    assert refused.value.status == 422
    long = "s3://bucket/" + "y" * 4000
    per_shard = len(json.dumps([long], separators=(",", ":"))) + 1
    over = sharded.CONFIGMAP_MAX_BYTES // per_shard + 1
    spec = TrainingJobSpec(**{**_spec().model_dump(), "shards": {**_spec().shards.model_dump(), "count": over,
                                                                 "inputs": [[long]] * over}})
    backend = get_backend("indexed-job", api_client=kube_cluster.api_client(), namespace=namespace,
                          per_index_retries=False)
    with pytest.raises(JobSubmissionError, match=r"^shards\.inputs: "):
        backend.submit("big", spec, IDENTITY.labels())
    with pytest.raises(ApiError):
        kube_cluster.request("GET", resource_path("batch/v1", "Job", namespace, "big"))


def test_the_result_of_a_completed_sharded_job_is_read_from_its_job_and_what_its_pods_committed(kube_cluster, namespace,
                                                                                               tmp_path):
    """The pods' entry point run as each of 3 pods would (the Job's uid from its controller-uid label, the completion
    index), one shard committed by an earlier Job, one failing every try; the Job then Complete (played): its status
    is SUCCEEDED and job_result is a ShardQueue.result() of what they committed and recorded."""
    output = tmp_path / "model" / "shards"
    spec = TrainingJobSpec(framework="generic", num_workers=2, image="registry.example/score:1",
                           model_dir=str(tmp_path / "model"), scheduling={"gang": False},
                           command=[sys.executable, "-c", "import os, pathlib, sys; i = os.environ['AIRFLOW_ML_SHARD_INDEX']; "
                                    "sys.exit(3) if i == '2' else pathlib.Path(os.environ['AIRFLOW_ML_SHARD_OUTPUT'], "
                                    "'_ROWS').write_text(str(10 + int(i)))"],
                           shards={"count": 4, "output": str(output), "max_attempts": 2, "max_failed_shards": 1})
    backend = get_backend("indexed-job", api_client=kube_cluster.api_client(), namespace=namespace,
                          per_index_retries=False)
    assert backend.submit("scored", spec, IDENTITY.labels()) is True
    job = backend.get("Job", "scored")
    (worker,) = job["spec"]["template"]["spec"]["containers"]
    argv = [sys.executable if arg == "python" else arg for arg in worker["command"]]
    labels = job["spec"]["template"]["metadata"]["labels"]
    for index, uid in ((0, "an-earlier-job"), (0, labels["controller-uid"]), (1, None), (2, None), (3, None)):
        env = {**os.environ, "JOB_COMPLETION_INDEX": str(index), "AIRFLOW_ML_JOB_UID": uid or labels["controller-uid"]}
        assert subprocess.run(argv, env=env, timeout=60).returncode == 0
    kube_cluster.patch_status(resource_path("batch/v1", "Job", namespace, "scored"), {
        "succeeded": 4, "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-12-02T00:00:00Z"}]})
    assert backend.status("scored").state is JobState.SUCCEEDED
    assert backend.job_result("scored") == {
        "shards": 4, "shards_done": 3, "shards_ran": 2, "shards_skipped": 1, "shards_retried": 1, "shards_failed": 1,
        "failed_shards": [2], "rows": 24}


def test_a_disrupted_pod_of_a_sharded_job_is_no_preemption_of_the_job(kube_cluster, namespace):
    """A lost pod of a sharded Job is the Job controller's to replace (its shard alone runs again): the job stays
    RUNNING, where a lost pod of any other Job makes the job PREEMPTED (tests/integration/kubernetes/test_disruption.py)
    and the task would resubmit it, stopping every shard in flight."""
    backend = get_backend("indexed-job", api_client=kube_cluster.api_client(), namespace=namespace,
                          per_index_retries=False)
    assert backend.submit("spot", _spec(count=8), IDENTITY.labels()) is True
    job = backend.get("Job", "spot")
    for index in range(2):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"spot-{index}-x", "namespace": namespace, "labels": job["spec"]["template"]["metadata"]["labels"],
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "spot", "uid": job["metadata"]["uid"],
                                 "controller": True}]},
            "spec": {"containers": [{"name": "worker", "image": "img:1"}]}}
        kube_cluster.request("POST", resource_path("v1", "Pod", namespace), pod)
    kube_cluster.patch_status(resource_path("batch/v1", "Job", namespace, "spot"), {"active": 2})
    kube_cluster.patch_status(resource_path("v1", "Pod", namespace, "spot-1-x"), {"conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
         "message": "PodGC: node no longer exists", "lastTransitionTime": "2026-12-02T00:00:00Z"}]})
    status = backend.status("spot")
    assert status.state is JobState.RUNNING, status
    plain = dict(job, metadata={**job["metadata"], "labels": {k: v for k, v in job["metadata"]["labels"].items()
                                                                if k != sharded.SHARDED_LABEL}})
    assert backend.replaces_lost_pods(job) and not backend.replaces_lost_pods(plain)
    assert backend._read_lost(job) is not None, "the pod is lost: only the job's own controller replaces it"


def test_followed_through_the_shared_watch_a_sharded_job_with_a_disrupted_pod_runs_on_to_its_end(
        kube_cluster, kubelet, namespace):
    """The deferred task's path (statuses: the shared Job and pod watches, the backend as the connection builds it):
    a disrupted pod of the sharded Job never makes it PREEMPTED; the Job's Complete ends it SUCCEEDED."""
    import asyncio

    from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
    from airflow_ml_provider.jobs.state import JobStatus

    backend = TrainingBackendHook().get_backend("indexed-job")
    backend.per_index_retries = False  # as on a 1.22-1.28 cluster: the test server predates Indexed Jobs
    assert backend.submit("spot", _spec(count=8), IDENTITY.labels()) is True
    job = backend.get("Job", "spot")
    pods = resource_path("v1", "Pod", namespace)

    def play() -> None:
        for index in range(2):
            kube_cluster.request("POST", pods, {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"spot-{index}-x", "namespace": namespace, "labels": job["spec"]["template"]["metadata"]["labels"],
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "spot",
                                     "uid": job["metadata"]["uid"], "controller": True}]},
                "spec": {"nodeName": "fake-node", "containers": [{"name": "worker", "image": "img:1"}]}})
        kube_cluster.patch_status(resource_path("batch/v1", "Job", namespace, "spot"), {"active": 2})
        kube_cluster.patch_status(f"{pods}/spot-1-x", {"conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
             "message": "Pod was terminated in response to imminent node shutdown.",
             "lastTransitionTime": "2026-12-02T00:00:00Z"}]})

    async def follow() -> list[JobStatus]:
        seen: list[JobStatus] = []
        async for status in backend.statuses("spot", interval=0.5):
            seen.append(status)
            if len(seen) == 1:
                await asyncio.to_thread(play)
            if status.state is JobState.RUNNING and len([s for s in seen if s.state is JobState.RUNNING]) == 3:
                await asyncio.to_thread(kube_cluster.patch_status, resource_path("batch/v1", "Job", namespace, "spot"),
                                        {"active": 0, "succeeded": 8, "conditions": [
                                            {"type": "Complete", "status": "True",
                                             "lastTransitionTime": "2026-12-02T00:01:00Z"}]})
            if status.state.is_terminal:
                return seen

    seen = asyncio.run(asyncio.wait_for(follow(), 120))
    assert seen[-1].state is JobState.SUCCEEDED
    assert JobState.PREEMPTED not in {status.state for status in seen}, seen
    assert JobState.RUNNING in {status.state for status in seen}
    # the watched Job's count of settled shards, the follower's progress line and shards_done point (its own test)
    assert {status.progress for status in seen if status.state is JobState.RUNNING} == {(0, 8)}, seen


def test_a_sharded_task_on_indexed_job_gets_the_shards_result_in_its_xcom(kube_cluster, namespace, run_dag,
                                                                          monkeypatch, tmp_path):
    """dag.test() of a sharded TrainingJobOperator task on indexed-job (the connection's per_index_retries off: the
    test server predates Indexed Jobs) while the test plays its pods: each index's pod command run here with the
    Job's uid, then the Job Complete. The task's XCom metrics are the job's ShardQueue result (the job runner merges
    the backend's job_result: its pods' log has no launcher's line)."""
    import threading

    from support import wait_for

    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT", json.dumps(
        {"conn_type": "ml_training", "extra": {"per_index_retries": "off", "artifact_root": str(tmp_path / "ml")}}))
    backend = get_backend("indexed-job", api_client=kube_cluster.api_client(), namespace=namespace,
                          per_index_retries=False)
    jobs = resource_path("batch/v1", "Job", namespace)
    played = threading.Event()

    def play() -> None:
        listed = wait_for(lambda: played.is_set() or kube_cluster.request("GET", jobs)["items"], timeout=120,
                          what="the task's Job")
        if played.is_set():  # the task ended without a Job
            return
        job = listed[0]
        (worker,) = job["spec"]["template"]["spec"]["containers"]
        argv = [sys.executable if arg == "python" else arg for arg in worker["command"]]
        uid = job["spec"]["template"]["metadata"]["labels"]["controller-uid"]
        env = {e["name"]: e["value"] for e in worker["env"] if "value" in e}
        for index in range(job["spec"]["completions"]):
            subprocess.run(argv, env={**os.environ, **env, "JOB_COMPLETION_INDEX": str(index),
                                      "AIRFLOW_ML_JOB_UID": uid}, timeout=60, check=True)
        kube_cluster.patch_status(f"{jobs}/{job['metadata']['name']}", {"succeeded": 4, "conditions": [
            {"type": "Complete", "status": "True", "lastTransitionTime": "2026-12-02T00:00:00Z"}]})
        played.set()

    player = threading.Thread(target=play, daemon=True)
    player.start()
    result = run_dag("ml_test_sharded_indexed_job")
    done = played.is_set()
    played.set()
    player.join(10)
    assert done and result.state == "success", result.task_states
    xcom = result.xcom["score"]
    assert xcom["backend"] == "indexed-job" and xcom["state"] == "SUCCEEDED"
    assert {"shards": 4, "shards_done": 3, "shards_ran": 3, "shards_skipped": 0, "shards_retried": 1,
            "shards_failed": 1, "failed_shards": [2], "rows": 10 + 11 + 13}.items() <= xcom["metrics"].items()
    assert backend.status(xcom["job_name"]).state is JobState.SUCCEEDED
