"""A pod of a sharded Indexed Job (runtime.shard_pod), run as the pod runs it: a process with the Job controller's
JOB_COMPLETION_INDEX, committing under a real folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from airflow_ml_provider.runtime import shards

# The shard's program: it counts its runs in RUNS, writes what it read, fails while its try is below FAIL_UNTIL.
PROGRAM = """
import json, os, pathlib, sys
index, attempt = os.environ["AIRFLOW_ML_SHARD_INDEX"], int(os.environ["AIRFLOW_ML_SHARD_ATTEMPT"])
runs = pathlib.Path(os.environ["RUNS"])
with runs.open("a") as f:
    f.write(f"{index}:{attempt}\\n")
if attempt < int(os.environ.get("FAIL_UNTIL", "0")):
    sys.exit(3)
out = pathlib.Path(os.environ["AIRFLOW_ML_SHARD_OUTPUT"])
(out / "part.json").write_text(json.dumps({"index": int(index), "inputs": json.loads(os.environ["AIRFLOW_ML_SHARD_INPUTS"]),
                                            "count": os.environ["AIRFLOW_ML_SHARD_COUNT"]}))
(out / "_ROWS").write_text("4")
"""


def _pod(tmp_path: Path, index: int, *options: str, env: dict | None = None) -> subprocess.CompletedProcess:
    plan = tmp_path / "inputs.jsonl"
    plan.write_text("".join(json.dumps([f"/data/{i}.csv"]) + "\n" for i in range(4)))
    argv = [sys.executable, "-m", "airflow_ml_provider.runtime.shard_pod", "--output", str(tmp_path / "out"),
            "--count", "4", "--max-attempts", "3", "--inputs", str(plan), *options, "--", sys.executable, "-c", PROGRAM]
    full = {**os.environ, "JOB_COMPLETION_INDEX": str(index), "RUNS": str(tmp_path / "runs"),
            "AIRFLOW_ML_JOB_UID": "job-1", **(env or {})}
    return subprocess.run(argv, env=full, capture_output=True, text=True, timeout=60)


def _runs(tmp_path: Path) -> list[str]:
    runs = tmp_path / "runs"
    return runs.read_text().split() if runs.exists() else []


def test_a_pod_runs_its_indexs_shard_with_its_own_inputs_commits_it_and_a_rerun_pod_skips_it(tmp_path):
    (tmp_path / "out").mkdir()
    done = _pod(tmp_path, 2)
    assert done.returncode == 0, done.stderr
    part = json.loads((tmp_path / "out" / "shard-000002" / "part.json").read_text())
    assert part == {"index": 2, "inputs": ["/data/2.csv"], "count": "4"}
    marker = json.loads((tmp_path / "out" / "shard-000002" / shards.MARKER).read_text())
    assert (marker["job"], marker["rows"], marker["attempt"], marker["inputs"]) == ("job-1", 4, 1, ["/data/2.csv"])
    again = _pod(tmp_path, 2, env={"AIRFLOW_ML_JOB_UID": "job-2"})
    assert again.returncode == 0 and "shard 2: committed already; skipped" in again.stdout
    assert _runs(tmp_path) == ["2:1"], "the committed shard did not run again"


def test_without_per_index_retries_the_pod_retries_its_shard_then_records_it_failed(tmp_path):
    (tmp_path / "out").mkdir()
    flaky = _pod(tmp_path, 1, env={"FAIL_UNTIL": "2"})
    assert flaky.returncode == 0 and json.loads((tmp_path / "out" / "shard-000001" / shards.MARKER).read_text())[
        "attempt"] == 2
    failing = _pod(tmp_path, 3, "--max-failed", "1", env={"FAIL_UNTIL": "9"})
    assert failing.returncode == 0, "one failed shard, within max_failed: settled"
    assert shards.failed_record(str(tmp_path / "out"), 3)["attempts"] == 3
    assert not shards.committed(str(tmp_path / "out"), 3)
    rerun = _pod(tmp_path, 3, "--max-failed", "1", env={"FAIL_UNTIL": "9"})
    assert rerun.returncode == 0 and "failed already in this job" in rerun.stdout
    assert _runs(tmp_path) == ["1:1", "1:2", "3:1", "3:2", "3:3"], "a settled shard is not run again by its job"
    over = _pod(tmp_path, 0, "--max-failed", "0")
    assert over.returncode == 1 and "more than 0 shard(s) of this job failed" in over.stdout
    assert "0:1" not in _runs(tmp_path)
    committed, failed = shards.records(str(tmp_path / "out"))
    assert sorted(committed) == [1] and sorted(failed) == [3]


def test_with_per_index_retries_each_pod_tries_once_its_try_the_controllers_failure_count_plus_one(tmp_path):
    (tmp_path / "out").mkdir()
    first = _pod(tmp_path, 0, "--per-index", env={"AIRFLOW_ML_INDEX_FAILURES": "0", "FAIL_UNTIL": "9"})
    assert first.returncode == 1 and shards.failed_record(str(tmp_path / "out"), 0) is None
    last = _pod(tmp_path, 0, "--per-index", env={"AIRFLOW_ML_INDEX_FAILURES": "2", "FAIL_UNTIL": "9"})
    assert last.returncode == 1 and shards.failed_record(str(tmp_path / "out"), 0)["attempts"] == 3
    ok = _pod(tmp_path, 1, "--per-index", env={"AIRFLOW_ML_INDEX_FAILURES": "1", "FAIL_UNTIL": "2"})
    assert ok.returncode == 0
    assert _runs(tmp_path) == ["0:1", "0:3", "1:2"]


SERVE_WORKER = """
import os, pathlib
from airflow_ml_provider.runtime.shards import serve

def score(shard):
    with open(os.environ["RUNS"], "a") as f:
        f.write(f"{shard.index}:{shard.attempt}\\n")
    if shard.attempt < int(os.environ.get("FAIL_UNTIL", "0")):
        raise RuntimeError("not yet")
    pathlib.Path(shard.output, "inputs.txt").write_text(",".join(shard.inputs))
    return 7

raise SystemExit(serve(score))
"""


def test_an_in_process_plans_pod_runs_the_serve_worker_on_its_one_shard_which_commits_it(tmp_path):
    """``in_process`` (a ``serve`` worker, as BatchScoringOperator's): the worker commits the shard itself, outside a
    launcher's stream; the pod retries a failed try and skips a committed shard."""
    (tmp_path / "out").mkdir()
    plan = tmp_path / "inputs.jsonl"
    plan.write_text("".join(json.dumps([f"/data/{i}.csv"]) + "\n" for i in range(4)))
    argv = [sys.executable, "-m", "airflow_ml_provider.runtime.shard_pod", "--output", str(tmp_path / "out"), "--count",
            "4", "--max-attempts", "2", "--inputs", str(plan), "--in-process", "--", sys.executable, "-c", SERVE_WORKER]
    env = {**os.environ, "JOB_COMPLETION_INDEX": "3", "RUNS": str(tmp_path / "runs"), "AIRFLOW_ML_JOB_UID": "job-1",
           "FAIL_UNTIL": "2"}
    assert subprocess.run(argv, env=env, capture_output=True, timeout=60).returncode == 0
    marker = json.loads((tmp_path / "out" / "shard-000003" / shards.MARKER).read_text())
    assert (marker["rows"], marker["attempt"], marker["job"]) == (7, 2, "job-1")
    assert (tmp_path / "out" / "shard-000003" / "inputs.txt").read_text() == "/data/3.csv"
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "committed already" in again.stdout
    assert _runs(tmp_path) == ["3:1", "3:2"]
