"""Where a local job's overhead lies: before its first rank starts and after its last rank ends, side by side
with the same ranks under a bare launcher.

Each rank only prints the time when it starts (``T0``), sleeps ``--sleep`` seconds and prints the time when it
ends (``T1``), so the sides differ only in what runs around the ranks. Alternated runs of:

(a) ``LocalBackend.submit()`` of a 2-rank job of ``--framework``, followed to its end by the driver a sync
    training task uses (``local_overhead.follow_job``): its sandbox, launcher and follower included;
(b) the same ranks under the bare launcher: horovodrun or torchrun from the training environment, or for
    ``generic`` the two rank processes started directly.

Printed per side, medians: submit to the first ``T0`` ("before the first rank"), the first ``T0`` to the last
``T1`` (the ranks), the last ``T1`` to the end ("after the last rank": for (a), until the follower has read
the end), and for (a) the launcher's own ``launched_at`` after submit (its start: interpreter, imports,
the sandbox's set-up). Numbers only, never asserted.

    AIRFLOW_HOME=/tmp/bench-home .venv/bin/python benchmarks/job_phases.py [--framework generic|pytorch|horovod]
        [--runs 8] [--sleep 1]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from local_overhead import TRAIN_ENV, follow_job

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.follow import Action
from airflow_ml_provider.jobs.spec import TrainingJobSpec

RANKS = 2
BARE = {
    "generic": [],
    "pytorch": ["torchrun", "--standalone", "--nproc-per-node", str(RANKS), "--no-python"],
    "horovod": ["horovodrun", "-np", str(RANKS), "-H", f"localhost:{RANKS}", "--gloo", "--network-interface", "lo"],
}


def rank_command(sleep: float) -> list[str]:
    """(Each line one write: unbuffered, print() writes its parts apart, and two ranks sharing a pipe interleave.)"""
    line = "sys.stdout.write(f'{0} {{time.time()!r}}\\n'); sys.stdout.flush()"
    return ["python", "-c", f"import sys, time; {line.format('T0')}; time.sleep({sleep}); {line.format('T1')}"]


def rank_times(output: str) -> tuple[float, float]:
    """The first rank's start and the last rank's end, as the ranks printed them."""
    return (min(float(t) for t in re.findall(r"T0 ([0-9.]+)", output)),
            max(float(t) for t in re.findall(r"T1 ([0-9.]+)", output)))


def through_backend(backend: LocalBackend, name: str, framework: str, command: list[str]) -> tuple[float, ...]:
    start = time.time()
    backend.submit(name, TrainingJobSpec(framework=framework, num_workers=RANKS, command=command), {})
    step = follow_job(backend, name, "sync", lambda step: None)
    end = time.time()
    if step.action is not Action.FINISH:
        sys.exit(f"job {name}: {step.message}")
    first, last = rank_times((backend.job_dir(name) / "output.log").read_text())
    status = json.loads((backend.job_dir(name) / "status.json").read_text())
    return first - start, last - first, end - last, status["launched_at"] - start


def bare(framework: str, command: list[str], cwd: str) -> tuple[float, ...]:
    env = {**os.environ, "PATH": f"{TRAIN_ENV / 'bin'}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
           "PYTHONUNBUFFERED": "1", "GLOO_SOCKET_IFNAME": "lo"}
    argv = [str(TRAIN_ENV / "bin" / BARE[framework][0]), *BARE[framework][1:], *command] if BARE[framework] else None
    start = time.time()
    procs = ([subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
             if argv else [subprocess.Popen([str(TRAIN_ENV / "bin" / "python"), *command[1:]], env=env, cwd=cwd,
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                           for _ in range(RANKS)])
    output = "".join(proc.communicate()[0] for proc in procs)
    end = time.time()
    if any(proc.returncode for proc in procs):
        sys.exit(f"bare {framework}: exit {[proc.returncode for proc in procs]}\n{output[-2000:]}")
    first, last = rank_times(output)
    return first - start, last - first, end - last, 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", choices=sorted(BARE), default="generic")
    parser.add_argument("--runs", type=int, default=8, help="runs of each side, alternated (default 8)")
    parser.add_argument("--sleep", type=float, default=1.0, help="seconds each rank sleeps (default 1)")
    args = parser.parse_args()
    command = rank_command(args.sleep)
    sides: dict[str, list[tuple[float, ...]]] = {"(a) local backend": [], "(b) bare": []}
    with tempfile.TemporaryDirectory(prefix="bench-phases-") as tmp:
        backend = LocalBackend(root=tmp, image=str(TRAIN_ENV))
        for run in range(args.runs):
            sides["(a) local backend"].append(through_backend(backend, f"phases-{run}", args.framework, command))
            sides["(b) bare"].append(bare(args.framework, command, tmp))
    print(f"{args.framework}, {RANKS} ranks, {args.runs} runs per side, medians in ms")
    print(f"{'side':<20}{'before 1st rank':>16}{'ranks':>8}{'after last rank':>17}{'launcher start':>16}")
    for side, runs in sides.items():
        before, ranks, after, launcher = (statistics.median(run[i] for run in runs) * 1000 for i in range(4))
        print(f"{side:<20}{before:>16.0f}{ranks:>8.0f}{after:>17.0f}{launcher if launcher else float('nan'):>16.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
