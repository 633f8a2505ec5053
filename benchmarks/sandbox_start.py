"""What the local backend's sandbox (bubblewrap) adds to a job's start: sandboxed vs unsandboxed, side by side.

Each run submits the same one-worker job (``python -c pass`` from the training environment) twice, once
with ``sandbox="auto"`` (bubblewrap: PID/IPC namespaces, the read-only view, the hidden and bound
directories) and once with ``sandbox="off"``, alternating which goes first so both see the same load.
Two numbers per job:
- wall: ``submit()`` until ``status()`` reads the end (polled every 10 ms): what a task waits for;
- workers: the launcher's own timing in ``status.json`` (workers started -> ended): the worker's
  process from its spawn to its exit, which for a sandboxed job includes bwrap setting up the sandbox.
Printed: the medians of each side, their ratio, and the difference in ms per job.

    AIRFLOW_HOME=/tmp/bench-home .venv/bin/python benchmarks/sandbox_start.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from airflow_ml_provider.jobs.backends.local import sandbox as local_sandbox
from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState

TRAIN_ENV = Path(__file__).resolve().parent.parent / ".venv-train"
SIDES = ("sandboxed", "unsandboxed")


def run_job(backend: LocalBackend, name: str) -> tuple[float, float]:
    """(wall seconds, the worker's seconds as the launcher timed it) of one trivial job."""
    spec = TrainingJobSpec(framework="generic", num_workers=1, command=["python", "-c", "pass"])
    start = time.perf_counter()
    backend.submit(name, spec, {"benchmark": name})
    while not (status := backend.status(name)).state.is_terminal:
        time.sleep(0.01)
    wall = time.perf_counter() - start
    if status.state is not JobState.SUCCEEDED:
        sys.exit(f"job {name} ended {status.state.value}: {status.message}")
    timing = json.loads((backend.job_dir(name) / "status.json").read_text())
    return wall, timing["workers_ended_at"] - timing["launched_at"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="jobs per side, alternated (default 15)")
    args = parser.parse_args()
    if (why := local_sandbox.unavailable()) is not None:
        sys.exit(f"no sandbox to measure: {why}")
    image = str(TRAIN_ENV) if (TRAIN_ENV / "bin" / "python").exists() else sys.prefix
    wall: dict[str, list[float]] = {side: [] for side in SIDES}
    workers: dict[str, list[float]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        backends = {"sandboxed": LocalBackend(Path(tmp, "on"), image=image, sandbox="required"),
                    "unsandboxed": LocalBackend(Path(tmp, "off"), image=image, sandbox="off")}
        print(f"{args.runs} jobs per side, alternated; worker: `python -c pass` from {image}")
        for run in range(args.runs):
            order = SIDES if run % 2 == 0 else SIDES[::-1]
            for side in order:
                seconds, inner = run_job(backends[side], f"start-{side}-{run}")
                wall[side].append(seconds)
                workers[side].append(inner)
            print(f"run {run + 1:>3}  " + "  ".join(f"{side} {wall[side][-1] * 1000:6.0f} ms (worker "
                                                    f"{workers[side][-1] * 1000:5.0f} ms)" for side in SIDES),
                  flush=True)
    print(f"\n{'':<22}{'sandboxed':>12}{'unsandboxed':>13}{'ratio':>8}{'added':>12}")
    for label, values in (("wall, median", wall), ("worker, median", workers)):
        on, off = statistics.median(values["sandboxed"]), statistics.median(values["unsandboxed"])
        print(f"{label:<22}{on * 1000:>9.0f} ms{off * 1000:>10.0f} ms{on / off:>8.3f}{(on - off) * 1000:>+9.1f} ms")
    print("(added: the sandbox's start-up cost per job, median against median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
