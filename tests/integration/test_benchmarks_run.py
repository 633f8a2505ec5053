"""The benchmarks `make bench` runs still run: each small enough here to finish in seconds (their numbers
are only printed; this checks that they are produced, not what they are)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from support import REPO

pytestmark = pytest.mark.integration


def _bench(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=REPO, env=os.environ,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def test_lightgbm_parity_compares_one_and_two_workers():
    out = _bench("lightgbm_parity.py", "--runs", "1", "--rows", "4000", "--num-boost-round", "5")
    assert "AUC diff (1 - 2):" in out and "speed ratio 1-worker/2-worker:" in out


def test_preemption_cost_compares_resuming_and_restarting():
    out = _bench("preemption_cost.py", "--rounds", "200", "--rows", "20000", "--points", "0.25", "0.5", "--no-elastic")
    assert "resume cheaper than restart at every point >= 50%:" in out
    assert "(2/2)" in out, "both workers restored their saved scores"


def test_sandbox_start_compares_sandboxed_and_unsandboxed_jobs():
    from airflow_ml_provider.jobs.backends.local import sandbox as local_sandbox

    if (why := local_sandbox.unavailable()) is not None:
        pytest.skip(f"no sandbox here: {why}")
    out = _bench("sandbox_start.py", "--runs", "2")
    assert "wall, median" in out and "worker, median" in out and "added" in out
