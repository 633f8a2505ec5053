"""How cheaply one triggerer process follows N Kubernetes jobs: N = 10, 100, 1000 MPIJobs, each followed by
its own ``Backend.statuses`` (what every TrainingJobTrigger runs, with a backend built from the connection)
in one event loop against a real kube-apiserver (tests/kube_cluster.py).

Reports the API requests the followers caused (counted by the API server itself, from its /metrics),
per minute of waiting, beside what a per-job 2-second status poll would need (N x 30 per minute),
and the process's CPU time per job-minute while the jobs run; the one-off set-up reads (the list and
the watch) are reported apart. The MPI operator here has no gang scheduler (a default install), so no
PodGroup is looked up. Needs `make kube-apiserver`.

``--queueing kueue``: the jobs are queued by Kueue (played here: Kueue v0.19.2's Workload CRD from
`make crds`, one Workload per job saying the ClusterQueue has no quota for it), so the followers wait
on QUEUED jobs through the shared watches of the MPIJobs, the Workloads and the pods.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="watch-scale-"))

import urllib3  # noqa: E402
from kube_cluster import apiserver_binary, start_cluster  # noqa: E402

urllib3.disable_warnings()  # the test API server has a self-generated certificate

_METRIC = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$')


def trigger_reads(cluster) -> int:
    """GET/LIST/WATCH requests the API server has answered so far, on any resource the followers read
    (mpijobs, podgroups for the gang check of pending jobs, workloads, pods); the benchmark's own
    writes are POSTs and PATCHes."""
    import ssl
    import urllib.request

    from kube_cluster import TOKEN

    request = urllib.request.Request(cluster.url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    text = urllib.request.urlopen(request, context=ssl._create_unverified_context()).read().decode()
    total = 0
    for line in text.splitlines():
        match = _METRIC.match(line)
        labels = match and match["labels"]
        if labels and re.search(r'resource="(mpijobs|podgroups|workloads|pods)"', labels) and re.search(r'verb="(GET|LIST|WATCH)"', labels):
            total += int(float(match["value"]))
    return total


async def follow(names: list[str], wait_s: float, cluster, namespace: str):
    """(reads to set up, (reads, CPU s, seconds) while the jobs run, reads in all) for N followers."""
    from airflow_ml_provider.hooks.training_backend import TrainingBackendHook

    reported: set[str] = set()  # the followers that have had their job's first status

    async def first(name: str):
        backend = await asyncio.to_thread(TrainingBackendHook().get_backend, "mpijob")
        async for status in backend.statuses(name, 600):
            reported.add(name)
            if status.state.is_terminal:
                return status

    start_reads = trigger_reads(cluster)
    tasks = [asyncio.create_task(first(name)) for name in names]
    while len(reported) < len(names):  # until every follower follows its job through the shared watch, its status in
        if failed := next((task for task in tasks if task.done() and task.exception()), None):
            raise failed.exception()  # e.g. the watch could not list the jobs within its first-list timeout
        await asyncio.sleep(0.5)
    settled, before = -1, trigger_reads(cluster)
    while settled != before:  # ... and has finished its first status check
        settled = before
        await asyncio.sleep(3)
        before = trigger_reads(cluster)
    cpu_before, start = time.process_time(), time.monotonic()
    await asyncio.sleep(wait_s)  # the jobs "train": nothing changes, nothing should be asked
    waiting = trigger_reads(cluster) - before, time.process_time() - cpu_before, time.monotonic() - start
    for name in names:  # the controller finishes every job (its PATCHes are not counted)
        await asyncio.to_thread(cluster.patch_status, f"/apis/kubeflow.org/v2beta1/namespaces/{namespace}/mpijobs/{name}",
                                {"conditions": [{"type": "Succeeded", "status": "True",
                                                 "lastTransitionTime": "2026-11-21T00:00:00Z"}]})
    finals = await asyncio.gather(*tasks)
    assert all(status.state.value == "SUCCEEDED" for status in finals), finals[:3]
    return before - start_reads, waiting, trigger_reads(cluster) - start_reads


def queue(cluster, namespace: str, job: dict) -> None:
    """What Kueue does for a job it cannot admit: a Workload owned by the job, QuotaReserved false."""
    from airflow_ml_provider.jobs.backends.kubernetes.kueue import WORKLOAD_API

    path = f"/apis/{WORKLOAD_API}/namespaces/{namespace}/workloads"
    name = f"mpijob-{job['metadata']['name']}"
    cluster.request("POST", path, {
        "apiVersion": WORKLOAD_API, "kind": "Workload", "metadata": {"name": name, "ownerReferences": [{
            "apiVersion": job["apiVersion"], "kind": job["kind"], "name": job["metadata"]["name"],
            "uid": job["metadata"]["uid"], "controller": True}]},
        "spec": {"queueName": "team-a", "podSets": [
            {"name": "worker", "count": 2, "template": {"spec": {"containers": [{"name": "w", "image": "img:1"}]}}}]}})
    cluster.patch_status(f"{path}/{name}", {"conditions": [{
        "type": "QuotaReserved", "status": "False", "reason": "Pending", "lastTransitionTime": "2026-11-26T00:00:00Z",
        "message": "couldn't assign flavors to pod set worker: insufficient quota for nvidia.com/gpu in flavor spot"}]})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--wait", type=float, default=30.0, help="seconds the jobs run while being followed")
    parser.add_argument("--queueing", choices=["kueue"], help="the jobs wait in Kueue's queue (QUEUED) meanwhile")
    args = parser.parse_args()
    binary = apiserver_binary()
    if binary is None:
        print("no kube-apiserver: run `make kube-apiserver` first", file=sys.stderr)
        return 1
    from kube_cluster import CRDS_DIR

    cluster = start_cluster(binary, crds=sorted(CRDS_DIR.glob("*.yaml")) + (
        [CRDS_DIR / "next" / "kueue.x-k8s.io_workloads.yaml"] if args.queueing else []))
    namespace = "bench"
    cluster.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(cluster.kubeconfig), "namespace": namespace}})
    if args.queueing:
        os.environ["AIRFLOW_CONN_ML_TRAINING_DEFAULT"] = json.dumps(
            {"conn_type": "ml_training", "extra": {"queueing": args.queueing}})
    from airflow_ml_provider import labels
    from airflow_ml_provider.jobs.backends import get_backend
    from airflow_ml_provider.jobs.spec import TrainingJobSpec

    jobs = get_backend("mpijob", api_client=cluster.api_client(), namespace=namespace, queueing=args.queueing)
    spec = TrainingJobSpec(framework="horovod", command=["python", "t.py"], num_workers=2, image="img:1",
                           scheduling={"queue": "team-a"})
    rows = []
    try:
        for size in (int(n) for n in args.sizes.split(",")):
            names = [f"bench-{size}-{i}" for i in range(size)]
            for name in names:
                jobs.submit(name, spec, {labels.JOB_NAME: name})
                if args.queueing:
                    queue(cluster, namespace, jobs.get("MPIJob", name))
            setup, (reads, cpu, elapsed), total = asyncio.run(follow(names, args.wait, cluster, namespace))
            per_minute = reads / elapsed * 60
            rows.append((size, setup, reads, per_minute, size * 30, cpu / size / elapsed * 60 * 1000, total))
            print(f"N={size}: set-up {setup} reads; while running {reads} reads in {elapsed:.0f}s ({per_minute:.1f}/min) "
                  f"vs {size * 30}/min for a 2 s poll; CPU {cpu / size / elapsed * 60 * 1000:.2f} ms per job-minute; "
                  f"{total} reads from start to the last event", flush=True)
            for name in names:
                jobs.delete(name)
    finally:
        cluster.stop()
    print("\n    N | set-up reads | reads/min running | 2s-poll reads/min | CPU ms per job-minute | reads in all")
    for size, setup, _, per_minute, poll, cpu_ms, total in rows:
        print(f"{size:5d} | {setup:12d} | {per_minute:17.1f} | {poll:17d} | {cpu_ms:21.2f} | {total:12d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
