"""What a sharded job costs per shard, what it leaves in the metadata DB, and what a preemption re-runs.

(a) Orchestration per shard: a sharded job of ``--shards`` no-op shards (``runtime.shards.serve`` over a
    function that does nothing) with ``--workers`` workers on the local backend, sandboxed, and the same job
    of ``--small`` shards. The launcher times its workers' span (status.json); the difference of the two
    spans over the difference of their shard counts is what one more shard costs: handing it out, the
    worker's commit (a folder, its marker, a rename) and its report, none of it the shard's own work
    (there is none). Printed per shard of wall time and per shard of a worker's time (x workers); target:
    at most 5 ms.
(b) Metadata DB rows: one task running the ``--shards`` job through a job operator, against ``--mapped``
    mapped no-op tasks (``@task`` expanded, each returning a small dict as a per-shard task does), each run
    with ``dag.test()`` on the SQLite metadata DB of ``$AIRFLOW_HOME``; rows added over all tables, and the
    mapped side's rows per task instance. Mapping 10,000 tasks needs ``[core] max_map_length`` raised (1,024
    by default) and dag.test() runs each task instance in turn: ``--mapped`` below 10,000 is measured, and
    the rows at 10,000 extrapolated from it (said so in the output).
(c) A scoring job of ``--kill-shards`` Parquet files (``runtime.score --shards``, a LightGBM model, 2 workers)
    SIGKILLed whole once half its shards are committed, then resubmitted as the operator does after a
    preemption: how many shards were in flight at the kill (their tries' folders in ``shards/.tmp``), how
    many the resumed job ran, and whether any shard was committed twice; target: it re-runs at most
    ``--workers`` shards beyond those never started.

    AIRFLOW_HOME=/tmp/bench-home .venv/bin/python benchmarks/sharded_overhead.py [--shards 10000] [--workers 2]
        [--small 100] [--mapped 1000] [--kill-shards 2000] [--no-db]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRAIN_ENV = REPO / ".venv-train"
SCORING_DATA = REPO / "tests" / "fixtures" / "shards" / "scoring_data.py"
NOOP = "from airflow_ml_provider.runtime.shards import serve; raise SystemExit(serve(lambda shard: 0))"
TARGET_MS = 5.0


def _spec(root: Path, name: str, command: list[str], count: int, workers: int, **plan):
    from airflow_ml_provider.jobs.spec import TrainingJobSpec

    model_dir = f"{root}/artifacts/{name}/model"
    return TrainingJobSpec(framework="generic", command=command, num_workers=workers, model_dir=model_dir,
                           shards={"count": count, "output": f"{model_dir}/shards", "in_process": True, **plan})


def _run(backend, name: str, spec, timeout: float = 3600) -> dict:
    backend.submit(name, spec, {})
    deadline = time.monotonic() + timeout
    while not backend.status(name).state.is_terminal:
        if time.monotonic() > deadline:
            backend.cancel(name)
            sys.exit(f"job {name} still {backend.status(name).state.value} after {timeout:g} s: cancelled")
        time.sleep(0.1)
    status = json.loads((backend.job_dir(name) / "status.json").read_text())
    if status["state"] != "SUCCEEDED":
        sys.exit(f"job {name} ended {status['state']}: {status.get('message')}")
    return status


def orchestration(root: Path, shards: int, small: int, workers: int) -> None:
    from airflow_ml_provider.jobs.backends.local.backend import LocalBackend

    backend = LocalBackend(root, image=str(TRAIN_ENV))
    spans = {}
    for count in (small, shards):
        status = _run(backend, f"noop-{count}", _spec(root, f"noop-{count}", ["python", "-c", NOOP], count, workers))
        spans[count] = status["workers_ended_at"] - status["launched_at"]
        print(f"{count:>7,} no-op shards, {workers} workers: the workers' span {spans[count]:.2f} s")
    per_shard = (spans[shards] - spans[small]) / (shards - small) * 1000
    print(f"orchestration per shard: {per_shard:.3f} ms of wall time, {per_shard * workers:.3f} ms of a worker's "
          f"time (target <= {TARGET_MS:g} ms beyond the shard's work: {'met' if per_shard * workers <= TARGET_MS else 'NOT met'})")


# The DAGs (b) runs: dag.test() runs a DAG that a bundle's folder holds, so they are a file of their own
DAGS = """
import os

from airflow.sdk import DAG, task

from airflow_ml_provider.jobs.spec import Framework
from airflow_ml_provider.operators.base_job import BaseJobOperator
from airflow_ml_provider.operators.config import JobRequest


class NoopShards(BaseJobOperator):
    def job_request(self):
        return JobRequest(Framework.GENERIC, ["python", "-c", os.environ["BENCH_NOOP"]],
                          num_workers=int(os.environ["BENCH_WORKERS"]),
                          shards={"count": int(os.environ["BENCH_SHARDS"]), "in_process": True})


with DAG("bench_sharded", schedule=None) as sharded:
    NoopShards(task_id="shards")

with DAG("bench_mapped", schedule=None) as mapped:
    @task
    def shard(index: int) -> dict:
        return {"index": index}

    shard.expand(index=list(range(int(os.environ["BENCH_MAPPED"]))))
"""


def db_rows(shards: int, workers: int, mapped: int) -> None:
    import runpy

    home = Path(os.environ["AIRFLOW_HOME"])
    folder = Path(tempfile.mkdtemp(prefix="bench-dags-"))
    (folder / "bench_sharded_dags.py").write_text(DAGS)
    os.environ.update({  # (before Airflow reads its configuration) dag.test() runs a DAG of a bundle's folder
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__DAGS_FOLDER": str(folder),
        "AIRFLOW__CORE__MAX_MAP_LENGTH": str(max(mapped, 1024)),
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps([{
            "name": "bench", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
            "kwargs": {"path": str(folder)}}]),
        "BENCH_NOOP": NOOP, "BENCH_WORKERS": str(workers), "BENCH_SHARDS": str(shards), "BENCH_MAPPED": str(mapped)})
    os.environ.setdefault("AIRFLOW_ML_LOCAL_IMAGE", str(TRAIN_ENV))
    if not (home / "airflow.db").exists():
        subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    dags = runpy.run_path(str(folder / "bench_sharded_dags.py"))
    for label, dag, count in ((f"1 task, a job of {shards:,} shards", dags["sharded"], shards),
                              (f"{mapped:,} mapped tasks", dags["mapped"], mapped)):
        before, started = _rows(), time.monotonic()
        state = str(dag.test().state)
        added, took = _rows() - before, time.monotonic() - started
        print(f"metadata DB rows, {label}: {added:,} ({state}, {took:.1f} s)")
        if dag is dags["sharded"]:
            one = added  # a run of one task instance: the DAG's and the run's rows, and the task's
        elif count < shards:  # each mapped task instance beyond the first adds what one costs
            per = (added - one) / (count - 1)
            print(f"metadata DB rows, {shards:,} mapped tasks: {one + per * (shards - 1):,.0f} ({per:.1f} a task "
                  f"instance; extrapolated from {count:,}, not run at {shards:,})")


def _rows() -> int:
    from airflow.settings import engine
    from sqlalchemy import inspect, text

    with engine.connect() as connection:
        return sum(connection.execute(text(f'SELECT count(*) FROM "{table}"')).scalar()
                   for table in inspect(engine).get_table_names())


def preemption(root: Path, count: int, workers: int) -> None:
    import lightgbm as lgb
    import numpy as np

    from airflow_ml_provider.jobs.backends.local.backend import LocalBackend, job_processes

    data = root / "data" / "bench-scoring"
    subprocess.run([str(TRAIN_ENV / "bin" / "python"), str(SCORING_DATA), "make", str(data), str(count), "200", "5"],
                   check=True)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 5))
    model = data / "model.txt"
    lgb.train({"objective": "binary", "verbosity": -1, "num_threads": 1}, lgb.Dataset(X, X[:, 0] > 0), 20)\
        .save_model(model)
    files = sorted(str(path) for path in data.glob("part-*.parquet"))
    command = ["python", "-m", "airflow_ml_provider.runtime.score", "--model", str(model), "--features", "5",
               "--shards"]
    backend = LocalBackend(root, image=str(TRAIN_ENV))
    name = "kill-half"
    spec = _spec(root, name, command, count, workers, inputs=[[path] for path in files])
    out = Path(spec.shards.output)
    backend.submit(name, spec, {})
    uid = json.loads((backend.job_dir(name) / "job.json").read_text())["uid"]
    while not list(out.glob("shard-*")):  # its workers run: found now (a search of every process takes a while)
        time.sleep(0.01)
    procs = sorted(job_processes(uid), key=lambda proc: "AIRFLOW_ML_RANK" not in _environ(proc))
    while len(list(out.glob("shard-*"))) < count // 2:
        if backend.status(name).state.is_terminal:
            sys.exit(f"job {name} ended before half its shards were committed")
        time.sleep(0.005)
    for proc in procs:
        proc.send_signal(signal.SIGKILL)  # its workers first, mid-shard, then the launcher and the sandbox
    while not backend.status(name).state.is_terminal or job_processes(uid):  # (none commits any more)
        time.sleep(0.05)
    committed = len(list(out.glob("shard-*")))
    in_flight = len({path.name.rsplit("-", 1)[0] for path in (out / ".tmp").glob("shard-*")})
    print(f"scoring job of {count:,} shards, {workers} workers, SIGKILLed at {committed:,} committed "
          f"({backend.status(name).state.value}); in flight at the kill: {in_flight}")
    status = _run(backend, name, spec)
    log = (backend.job_dir(name) / "output.log").read_text().splitlines()
    result = json.loads(next(line for line in log if line.startswith('[launcher] {"event": "result"'))[11:])
    markers = [json.loads((path / "_COMMITTED").read_text())["job"] for path in out.glob("shard-*")]
    twice = len(markers) - len(set(int(p.name[6:]) for p in out.glob("shard-*")))
    print(f"resumed ({status['state']}): skipped {result['shards_skipped']:,}, ran {result['shards_ran']:,} "
          f"(never started before: {count - committed - in_flight:,}; re-run, in flight at the kill: {in_flight}, "
          f"target <= {workers}: {'met' if in_flight <= workers else 'NOT met'}); committed twice: {twice}; "
          f"committed by the first attempt {markers.count(uid):,}, by the resumed one {len(markers) - markers.count(uid):,}")


def _environ(proc) -> dict:
    import psutil

    try:
        return proc.environ()
    except psutil.Error:
        return {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=10_000)
    parser.add_argument("--small", type=int, default=100, help="the shards of the job that times the fixed costs")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--mapped", type=int, default=1_000, help="mapped tasks the DB rows are measured with")
    parser.add_argument("--kill-shards", type=int, default=2_000)
    parser.add_argument("--no-db", action="store_true", help="skip (b), which needs an Airflow metadata DB")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-shards-") as tmp:
        root = Path(tmp) / "ml"
        orchestration(root, args.shards, args.small, args.workers)
        preemption(root, args.kill_shards, args.workers)
    if not args.no_db:
        db_rows(args.shards, args.workers, args.mapped)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
