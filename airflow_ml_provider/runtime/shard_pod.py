"""A pod of a sharded job's Indexed Job (the indexed-job backend): it runs the one shard its completion index names.

``python -m airflow_ml_provider.runtime.shard_pod --output OUT --count N --max-attempts K [--per-index]
[--inputs PLAN] [--in-process] -- PROGRAM ARGS...``: shard ``i`` is ``JOB_COMPLETION_INDEX`` (the Job controller's),
its inputs line ``i`` of ``PLAN`` (the plan's ConfigMap, mounted: one JSON list a line). A shard committed already
(a rerun pod, a resubmitted job) is skipped; otherwise PROGRAM runs with the worker's contract
(``AIRFLOW_ML_SHARD_INDEX``/``_COUNT``/``_INPUTS``/``_OUTPUT``/``_ATTEMPT``) and its output is committed as
``runtime.shards`` commits it (with ``--in-process`` PROGRAM is a ``serve`` worker that commits it itself).

Retries: with ``--per-index`` (a server that runs ``backoffLimitPerIndex``) one try per pod: a failed try exits 1 and
the Job controller makes the index a new pod, its try the pod's failure-count annotation + 1
(``AIRFLOW_ML_INDEX_FAILURES``), up to ``backoffLimitPerIndex`` = K - 1 failures. Without it, the pod itself tries
up to K times, then writes the shard's failure record (``runtime.shards.record_failure``) and exits 0: the shard is
settled as failed and no pod is spent on it again; a pod that finds more than ``--max-failed`` failed shards of its
job exits 1 at once, so the Job's ``backoffLimit`` ends it. A killed pod spends no try of the shard here (its
replacement starts at try 1); on a per-index server it counts as one of the index's failures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from airflow_ml_provider.runtime import shards

FAILURES_ENV = "AIRFLOW_ML_INDEX_FAILURES"  # the pod's batch.kubernetes.io/job-index-failure-count annotation
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
_INPUT_LINE_BYTES = 1 << 20


def shard_inputs(plan: str | None, index: int) -> list[str]:
    """Line ``index`` of the plan file (the shards' inputs, one JSON list a line), read line by line."""
    if not plan:
        return []
    with open(plan, "rb") as f:
        for number, line in enumerate(f):
            if number == index:
                inputs = json.loads(line[:_INPUT_LINE_BYTES])
                if not isinstance(inputs, list) or not all(isinstance(p, str) for p in inputs):
                    raise ValueError(f"{plan}: line {index} is not a JSON list of paths")
                return inputs
    raise ValueError(f"{plan}: no line {index} (the plan has fewer shards than the Job's completions)")


def _try(root: str, count: int, task: dict, argv: list[str], in_process: bool) -> dict:
    """One try of the shard (``runtime.shards``' report): run and committed as a launcher's worker commits it, or, for
    a ``serve`` worker (``in_process``), run with the shard named in its environment, committing it itself."""
    if not in_process:
        return shards._attempt(root, count, task, shards.program(argv, count))
    index = task["index"]
    if shards.committed(root, index):
        return {"index": index, "state": "skipped"}
    env = os.environ | {shards.INDEX_ENV: str(index), shards.COUNT_ENV: str(count), shards.ROOT_ENV: root,
                        shards.ATTEMPT_ENV: str(task["attempt"]), shards.INPUTS_ENV: json.dumps(task["inputs"])}
    env.pop(shards.STREAM_ENV, None)
    code = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL).returncode
    if code == 0 and shards.committed(root, index):
        return {"index": index, "state": "done"}
    return {"index": index, "state": "failed",
            "error": f"{argv[0]} exited with code {code}" + ("" if code else " without committing the shard")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shard_pod", description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--max-attempts", type=int, default=3)
    parser.add_argument("--max-failed", type=int, default=0)
    parser.add_argument("--inputs", help="the plan's inputs file (one JSON list a line)")
    parser.add_argument("--per-index", action="store_true", help="the Job controller retries the index")
    parser.add_argument("--in-process", action="store_true", help="PROGRAM commits the shard itself (serve)")
    parser.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("give the program to run after --")
    root, count = args.output, args.count
    index = int(os.environ[COMPLETION_INDEX_ENV])
    if not 0 <= index < count:
        parser.error(f"{COMPLETION_INDEX_ENV} {index} is not a shard of {count}")
    job = os.environ.get(shards.JOB_ENV)
    if shards.committed(root, index):
        print(f"shard {index}: committed already; skipped", flush=True)
        return 0
    record = shards.failed_record(root, index)
    if not args.per_index and record is not None and record.get("job") == job:
        print(f"shard {index}: failed already in this job ({record.get('attempts')} tries)", flush=True)
        return _failed_exit(root, count, job, args.max_failed)
    if not args.per_index and _too_many_failed(root, count, job, args.max_failed):
        print(f"shard {index}: not run: more than {args.max_failed} shard(s) of this job failed", flush=True)
        return 1
    inputs = shard_inputs(args.inputs, index)
    first = int(os.environ.get(FAILURES_ENV) or 0) + 1 if args.per_index else 1
    last = first if args.per_index else args.max_attempts
    report: dict = {}
    for attempt in range(first, last + 1):
        report = _try(root, count, {"index": index, "attempt": attempt, "inputs": inputs}, program, args.in_process)
        if report["state"] != "failed":
            print(f"shard {index}: {report['state']} (try {attempt} of {args.max_attempts})", flush=True)
            return 0
        print(f"shard {index}: try {attempt} of {args.max_attempts} failed: {report.get('error', '')}", flush=True)
    if last >= args.max_attempts:  # out of tries: say why, for the job's result
        shards.record_failure(root, index, {"attempts": last, "error": report.get("error", ""), "job": job})
    if args.per_index:
        return 1  # the Job controller's: another pod for the index, or the index failed (backoffLimitPerIndex)
    return _failed_exit(root, count, job, args.max_failed)


def _too_many_failed(root: str, count: int, job: str | None, max_failed: int) -> bool:
    _, failed = shards.records(root)
    return sum(1 for index, record in failed.items() if index < count and record.get("job") == job) > max_failed


def _failed_exit(root: str, count: int, job: str | None, max_failed: int) -> int:
    """0: the shard is settled as failed, within ``max_failed``; 1 once the job has more (its backoffLimit ends it)."""
    if _too_many_failed(root, count, job, max_failed):
        print(f"more than {max_failed} shard(s) of this job failed (max_failed_shards): the job fails", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
