"""The benchmarks `make bench` runs still run: each small enough here to finish in seconds (their numbers
are only printed; this checks that they are produced, not what they are)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from support import REPO, needs_torch

pytestmark = pytest.mark.integration


def _bench(script: str, *args: str, timeout: float = 300) -> str:
    try:
        done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=REPO,
                              env=os.environ, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:  # what it printed so far says where the time went
        pytest.fail(f"{script} ran past {timeout} s:\n{_text(exc.stdout)[-2000:]}\n{_text(exc.stderr)[-3000:]}")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def _text(output: bytes | str | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def test_lightgbm_parity_compares_one_and_two_workers():
    out = _bench("lightgbm_parity.py", "--runs", "1", "--rows", "4000", "--num-boost-round", "5")
    assert "AUC diff (1 - 2):" in out and "speed ratio 1-worker/2-worker:" in out


def test_xgboost_parity_compares_one_and_two_workers():
    out = _bench("xgboost_parity.py", "--runs", "1", "--rows", "4000", "--num-boost-round", "5")
    assert "AUC diff (1 - 2):" in out and "speed ratio 1-worker/2-worker:" in out
    assert re.search(r"^2 {9}\s*0\.\d{5}", out, re.M), out  # the 2-worker jobs' AUC: their tracker served them


def test_preemption_cost_compares_resuming_and_restarting():
    out = _bench("preemption_cost.py", "--rounds", "200", "--rows", "20000", "--points", "0.5", "--no-elastic")
    assert "resume cheaper than restart at every point >= 50%:" in out
    # every worker that had saved its scores for the checkpoint restored them (rank 1, killed, may not have
    # saved them yet: then it re-scores; rank 0 saves its scores before the checkpoint it resumes from)
    [(restored, saved)] = re.findall(r"\((\d)/(\d)\)", out)
    assert restored == saved and int(saved) >= 1, out


def test_a_job_past_its_timeout_is_cancelled_and_the_benchmark_stops_naming_it():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "preemption_cost.py"), "--rounds", "200",
                           "--rows", "20000", "--points", "0.5", "--no-elastic", "--job-timeout", "1"],
                          cwd=REPO, env=os.environ, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert re.search(r"job \S+ still (PENDING|RUNNING) after 1 s \(--job-timeout\): cancelled", done.stderr), done.stderr


# The PyTorch job: its fixed-size part and its elastic part, after the one clean run that times both parts'
# kills (each part alone would pay that run again: 2 ranks and 2 torchrun agents). 8 short epochs, killed
# past the 4th: under load the kill lands epochs late, and must still find some left. A stuck job ends the
# benchmark naming it (--job-timeout).
_TORCH_JOB = ("--trainer", "pytorch", "--rows", "4000", "--epochs", "8", "--points", "0.5", "--job-timeout", "400")
_RESUMED_ROW = re.compile(r"^ +50% \| +epoch \d+ \| +[0-9.]+ s \| ", re.MULTILINE)  # from a checkpoint, costs


@needs_torch
@pytest.mark.timeout(1200)  # three jobs of torch's start-up in four processes each, stretched by a loaded machine
def test_preemption_cost_resumes_a_fixed_pytorch_job_and_measures_an_elastic_restart():
    out = _bench("preemption_cost.py", *_TORCH_JOB, timeout=1100)
    fixed, elastic = out.split("elastic torch_ddp")
    assert "fixed-size torch_ddp (torchrun)" in fixed and "a clean run takes" in fixed, fixed
    assert _RESUMED_ROW.search(fixed) and "resume cheaper than restart" in fixed, fixed
    assert _RESUMED_ROW.search(elastic) and "resume cheaper than restart" in elastic, elastic


def test_sandbox_start_compares_sandboxed_and_unsandboxed_jobs():
    from airflow_ml_provider.jobs.backends.local import sandbox as local_sandbox

    if (why := local_sandbox.unavailable()) is not None:
        pytest.skip(f"no sandbox here: {why}")
    out = _bench("sandbox_start.py", "--runs", "2")
    assert "wall, median" in out and "worker, median" in out and "added" in out


def test_sharded_overhead_prints_the_cost_per_shard_the_db_rows_and_what_a_preemption_re_runs(tmp_path):
    home = tmp_path / "airflow-home"
    home.mkdir()
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sharded_overhead.py"), "--shards", "300",
                           "--small", "50", "--mapped", "10", "--kill-shards", "200"], cwd=REPO,
                          env={**os.environ, "AIRFLOW_HOME": str(home)}, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"^orchestration per shard: -?[\d.]+ ms of wall time, -?[\d.]+ ms of a worker's time", out, re.M), out
    assert re.search(r"^metadata DB rows, 1 task, a job of 300 shards: \d+ \(success", out, re.M), out
    assert re.search(r"^metadata DB rows, 300 mapped tasks: [\d,]+ \([\d.]+ a task instance; extrapolated from 10",
                     out, re.M), out
    assert re.search(r"; committed twice: 0; committed by the first attempt \d+, by the resumed one \d+$", out, re.M), out
