"""Overhead of the local backend on a PyTorch DDP job: wall time through the operator's path vs bare torchrun.

(a) ``LocalBackend.submit()`` of a 2-worker pytorch TrainingJobSpec (two torchrun agents in the job's
    sandbox), followed to its end by the driver a sync training task uses (``local_overhead.follow_job``);
(b) the same trainer under one bare ``torchrun --standalone --nproc-per-node 2`` from the training
    environment, output read to EOF.

The runs alternate (a, b, a, b, ...) so both sides see the same machine load; every run gets fresh model
and checkpoint dirs, so none resumes from another. Target: median(a) / median(b) <= 1.05. The numbers
are printed, never asserted: on a shared machine the load swings between runs.

    AIRFLOW_HOME=/tmp/bench-home .venv/bin/python benchmarks/torch_overhead.py [--runs 3] [--epochs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from local_overhead import TRAIN_ENV, artifact_args, run_job

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.spec import TrainingJobSpec

WORKERS = 2
TARGET = 1.05


def run_bare(command: list[str], cwd: Path) -> tuple[float, int]:
    """``command`` under bare torchrun (2 ranks on this machine); returns (seconds, output lines)."""
    bin_dir = TRAIN_ENV / "bin"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
           "PYTHONUNBUFFERED": "1", "OMP_WAIT_POLICY": "PASSIVE", "GLOO_SOCKET_IFNAME": "lo"}
    argv = [str(bin_dir / "torchrun"), "--standalone", "--nproc-per-node", str(WORKERS), "--no-python", *command]
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace")
    lines = proc.stdout.readlines()
    code = proc.wait()
    elapsed = time.perf_counter() - start
    if code:
        sys.exit(f"bare torchrun exited with {code}\n" + "".join(f"  {line}" for line in lines[-10:]))
    return elapsed, len(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each side, alternated (default 3)")
    parser.add_argument("--epochs", type=int, default=5, help="epochs per run (default 5)")
    args = parser.parse_args()
    if not (TRAIN_ENV / "bin" / "torchrun").exists():
        sys.exit(f"no torchrun in {TRAIN_ENV}/bin: run `make training-env` first")
    trainer = ["python", "-m", "airflow_ml_provider.runtime.torch_ddp", "--epochs", str(args.epochs)]
    print(f"{WORKERS} workers, {args.epochs} epochs, {args.runs} runs per side; training env {TRAIN_ENV}")
    times: dict[str, list[float]] = {"operator": [], "bare": []}
    with tempfile.TemporaryDirectory(prefix="bench-torch-") as tmp:
        backend = LocalBackend(root=tmp, image=str(TRAIN_ENV))
        for run in range(1, args.runs + 1):
            name = f"torch-overhead-{run}"
            artifacts = Path(backend.default_artifact_dir(name))  # the spec's dirs: the sandbox lets the job write them
            spec = TrainingJobSpec(framework="pytorch", num_workers=WORKERS, command=trainer,
                                   model_dir=str(artifacts / "model"), checkpoint_dir=str(artifacts / "ckpt"))
            seconds, lines, inner = run_job(backend, name, spec, "sync")
            times["operator"].append(seconds)
            print(f"run {run}  (a) operator path {seconds:6.1f} s  ({len(lines)} lines; the agents inside it "
                  f"{inner:.1f} s)", flush=True)
            bare = Path(tmp, f"bare-{run}")
            bare.mkdir()
            seconds, count = run_bare(trainer + artifact_args(bare), bare)
            times["bare"].append(seconds)
            print(f"run {run}  (b) bare torchrun  {seconds:6.1f} s  ({count} lines)", flush=True)
    medians = {side: statistics.median(values) for side, values in times.items()}
    ratio = medians["operator"] / medians["bare"]
    print(f"\n{'side':<20}{'median s':>10}  runs (s)")
    for side, label in (("operator", "(a) operator path"), ("bare", "(b) bare torchrun")):
        print(f"{label:<20}{medians[side]:>10.2f}  " + " ".join(f"{t:.1f}" for t in times[side]))
    print(f"{'ratio a/b':<20}{ratio:>10.3f}  target <= {TARGET}: {'met' if ratio <= TARGET else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
