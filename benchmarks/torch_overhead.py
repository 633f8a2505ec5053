"""Overhead of the local backend on a PyTorch DDP job: wall time through the operator's path vs bare torchrun.

(a) ``LocalBackend.submit()`` of a 2-worker pytorch TrainingJobSpec (one torchrun agent for both, in the job's
    sandbox), followed to its end by the driver a sync training task uses (``local_overhead.follow_job``);
(b) the same trainer under one bare ``torchrun --standalone --nproc-per-node 2`` from the training
    environment, output read to EOF, given the same TensorBoard directory (``local_overhead.same_work_env``).

The runs alternate (a, b, a, b, ...) so both sides see the same machine load; every run gets fresh model
and checkpoint dirs, so none resumes from another. Target: median(a) / median(b) <= 1.05. The numbers
are printed, never asserted: on a shared machine the load swings between runs.

    AIRFLOW_HOME=/tmp/bench-home .venv/bin/python benchmarks/torch_overhead.py [--runs 3] [--epochs 5]
"""

from __future__ import annotations

import argparse
import sys

from local_overhead import TRAIN_ENV, alternate, report, run_bare

WORKERS = 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each side, alternated (default 3)")
    parser.add_argument("--epochs", type=int, default=5, help="epochs per run (default 5)")
    args = parser.parse_args()
    if not (TRAIN_ENV / "bin" / "torchrun").exists():
        sys.exit(f"no torchrun in {TRAIN_ENV}/bin: run `make training-env` first")
    trainer = ["python", "-m", "airflow_ml_provider.runtime.torch_ddp", "--epochs", str(args.epochs)]
    print(f"{WORKERS} workers, {args.epochs} epochs, {args.runs} runs per side; training env {TRAIN_ENV}")
    torchrun = ["torchrun", "--standalone", "--nproc-per-node", str(WORKERS), "--no-python"]
    times, _ = alternate(args.runs, "pytorch", WORKERS, trainer, "sync",
                         lambda command, cwd, env: run_bare(torchrun, command, cwd, {**env, "GLOO_SOCKET_IFNAME": "lo"}))
    report(times, "bare torchrun")
    return 0


if __name__ == "__main__":
    sys.exit(main())
