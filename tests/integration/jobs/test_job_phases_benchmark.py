"""Smoke test of benchmarks/job_phases.py (docs/benchmarks.md's phases of a local job): both sides run real ranks,
and the ranks' own printed times bound what it reports (the numbers themselves are only printed)."""

from __future__ import annotations

import subprocess
import sys

from support import REPO


def test_the_phases_benchmark_times_real_ranks_on_both_sides(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "job_phases.py"), "--runs", "1", "--sleep", "0.3"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line[:20].strip(): line[20:].split() for line in done.stdout.splitlines() if line.startswith("(")}
    assert set(rows) == {"(a) local backend", "(b) bare"}, done.stdout
    for side, (before, ranks, after, launcher) in rows.items():
        assert float(before) > 0 and float(after) >= 0, done.stdout
        assert 300 <= float(ranks) < 10_000, done.stdout  # the ranks slept 0.3 s between their two prints
    assert 0 < float(rows["(a) local backend"][3]) < float(rows["(a) local backend"][0]), done.stdout
