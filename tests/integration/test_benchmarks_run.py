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
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=REPO, env=os.environ,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def test_lightgbm_parity_compares_one_and_two_workers():
    out = _bench("lightgbm_parity.py", "--runs", "1", "--rows", "4000", "--num-boost-round", "5")
    assert "AUC diff (1 - 2):" in out and "speed ratio 1-worker/2-worker:" in out


def test_preemption_cost_compares_resuming_and_restarting():
    out = _bench("preemption_cost.py", "--rounds", "200", "--rows", "20000", "--points", "0.25", "0.5", "--no-elastic")
    assert "resume cheaper than restart at every point >= 50%:" in out
    assert "(2/2)" in out, "both workers restored their saved scores"


@needs_torch
def test_preemption_cost_compares_resuming_and_restarting_a_pytorch_job_and_an_elastic_restart():
    out = _bench("preemption_cost.py", "--trainer", "pytorch", "--rows", "10000", "--epochs", "6", "--points", "0.25",
                 timeout=540)  # under the 600 s each test has (pyproject)
    fixed, elastic = out.split("elastic torch_ddp")
    row = re.compile(r"^ +25% \| +epoch \d+ \| +[0-9.]+ s \| ", re.MULTILINE)  # resumed from a checkpoint, costs
    assert "fixed-size torch_ddp (torchrun)" in fixed and row.search(fixed), fixed
    assert row.search(elastic), elastic
    assert "resume cheaper than restart" in fixed and "resume cheaper than restart" in elastic


def test_sandbox_start_compares_sandboxed_and_unsandboxed_jobs():
    from airflow_ml_provider.jobs.backends.local import sandbox as local_sandbox

    if (why := local_sandbox.unavailable()) is not None:
        pytest.skip(f"no sandbox here: {why}")
    out = _bench("sandbox_start.py", "--runs", "2")
    assert "wall, median" in out and "worker, median" in out and "added" in out
