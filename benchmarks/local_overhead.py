"""Overhead of the local backend on a Horovod job: wall time through the operator's path vs bare horovodrun.

(a) ``LocalBackend.submit()`` of a 2-rank Horovod TrainingJobSpec, then followed by the drivers a
    training task uses, with the operator's default ``poll_interval``: the sync operator's
    ``SyncDriver.run()`` (default), or with ``--follow deferred`` the trigger's ``follow_async`` awaited
    in an event loop of its own (without the trigger's XCom save of its state). Both wake on
    ``backend.statuses()`` (the local backend notices the end of a job within ~50 ms). The launcher,
    the log file and following (every line read, passed through the follow core, logged) all count.
(b) the same trainer under the same ``horovodrun`` the job runs (``horovodrun_main``: horovodrun without its
    per-run build probe, from the training environment), bare: output read to EOF, doing the same work: the
    TensorBoard directory every backend gives a job (``AIRFLOW_ML_TENSORBOARD_DIR``, whose scalars the trainer
    then writes) is given to it too, so the ratio is the provider's own cost, not the scalars'.

The runs alternate (a, b, a, b, ...) so both sides see the same machine load; every run gets a fresh job
name and fresh model/checkpoint dirs, so none resumes from another. Target: median(a) / median(b) <= 1.05,
i.e. running through the provider costs at most 5% over launching Horovod by hand. On a shared machine
whose load swings between runs, the printed "within (a)" ratio (each run of (a) against the horovodrun
its launcher ran, from the moment it runs in its sandbox to its end, timed in status.json; target <= 1.01)
isolates the provider's own share: submit, the launcher, the sandbox's start, the end and following.

    AIRFLOW_HOME=/tmp/bench-home .venv/bin/python benchmarks/local_overhead.py [--runs 5] [--epochs 5]
        [--follow sync|deferred]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from airflow_ml_provider.artifact_layout import TENSORBOARD_ENV, tensorboard_dir
from airflow_ml_provider.jobs.backends.base import JobSubmissionError
from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.backends.local.launcher import HOROVODRUN_MAIN
from airflow_ml_provider.jobs.drivers import SyncDriver, follow_async
from airflow_ml_provider.jobs.follow import Action, Decision, Follower, FollowOptions
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.logs.source import LogLine

TRAIN_ENV = Path(__file__).resolve().parent.parent / ".venv-train"
POLL_INTERVAL = FollowOptions().poll_interval  # what a training task polls at by default
RANKS = 2
TARGET = 1.05
WITHIN_TARGET = 1.01
LOG = logging.getLogger("benchmark.local_overhead")  # the task log's stand-in: records made, written nowhere
LOG.propagate = False
LOG.addHandler(logging.NullHandler())


def run_job(backend: LocalBackend, name: str, spec: TrainingJobSpec, follow: str) -> tuple[float, list[LogLine], float]:
    """Submit ``spec`` and follow it to the end (see the module docstring); return (seconds, the lines read,
    seconds horovodrun itself ran, as the launcher recorded in status.json: from the sandbox's report that it
    runs to its end). A job that is refused or
    does not succeed ends the benchmark (exit 1) with the reason the follower gave."""
    start = time.perf_counter()
    try:
        backend.submit(name, spec, {"benchmark": name})
    except JobSubmissionError as exc:
        sys.exit(f"job {name}: the local backend refused it: {exc}")
    lines: list[LogLine] = []
    step = follow_job(backend, name, follow, lambda step: lines.extend(step.lines))
    elapsed = time.perf_counter() - start
    if step.action is not Action.FINISH:
        tail = "\n".join(f"  {line}" for line in lines[-10:])
        sys.exit(f"job {name}: {step.message}\n{tail}")
    timing = json.loads((backend.job_dir(name) / "status.json").read_text())
    return elapsed, lines, timing["workers_ended_at"] - timing["workers_started_at"]


def follow_job(backend: LocalBackend, name: str, follow: str, on_step) -> Decision:
    """Follow the job to the follower's decision with the driver a sync (or deferred) task uses."""
    follower = Follower(FollowOptions(poll_interval=POLL_INTERVAL))
    source = backend.log_source(name)
    if follow == "deferred":
        return asyncio.run(follow_async(follower, LOG, backend, name, source, on_step=on_step))
    return SyncDriver(follower, LOG, backend, name, source, on_step=on_step).run()


def run_bare(launcher: list[str], command: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, int]:
    """``command`` under a bare ``launcher`` (horovodrun, torchrun: argv from the training env's bin/, up to
    the trainer); returns (seconds, output lines)."""
    bin_dir = TRAIN_ENV / "bin"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
           "PYTHONUNBUFFERED": "1", "OMP_WAIT_POLICY": "PASSIVE", **(env or {})}
    argv = [str(bin_dir / launcher[0]), *launcher[1:], *command]
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace")
    lines = proc.stdout.readlines()
    code = proc.wait()
    elapsed = time.perf_counter() - start
    if code:
        sys.exit(f"bare {launcher[0]} exited with {code}\n" + "".join(f"  {line}" for line in lines[-10:]))
    return elapsed, len(lines)


def same_work_env(base: Path) -> dict[str, str]:
    """What a backend's job gets that makes its trainer do more than a bare run's: a TensorBoard directory."""
    return {TENSORBOARD_ENV: tensorboard_dir(str(base / "ckpt"))}


def artifact_args(base: Path) -> list[str]:
    """Fresh model and checkpoint dirs under ``base``: the same argv on both sides, and no run resumes."""
    return ["--model-dir", str(base / "model"), "--checkpoint-dir", str(base / "ckpt")]


def alternate(runs: int, framework: str, workers: int, trainer: list[str], follow: str,
              bare) -> tuple[dict[str, list[float]], list[float]]:
    """``runs`` of (a) the job through the local backend and (b) ``bare(command, cwd, env)``, alternated, each
    run with fresh model/checkpoint dirs (none resumes); returns the seconds of each side and, per run of
    (a), its wall time over that of the launcher's workers inside it (timed in status.json)."""
    times: dict[str, list[float]] = {"operator": [], "bare": []}
    within: list[float] = []
    with tempfile.TemporaryDirectory(prefix=f"bench-{framework}-") as tmp:
        backend = LocalBackend(root=tmp, image=str(TRAIN_ENV))
        for run in range(1, runs + 1):
            name = f"{framework}-overhead-{run}"
            job_dir = Path(backend.default_artifact_dir(name))
            spec = TrainingJobSpec(framework=framework, num_workers=workers, command=trainer + artifact_args(job_dir),
                                   model_dir=str(job_dir / "model"), checkpoint_dir=str(job_dir / "ckpt"))
            seconds, lines, inner = run_job(backend, name, spec, follow)  # the spec's dirs: the sandbox binds them
            times["operator"].append(seconds)
            within.append(seconds / inner)
            print(f"run {run}  (a) operator path {seconds:6.1f} s  ({len(lines)} lines; its workers {inner:.1f} s, "
                  f"{1000 * (seconds - inner):.0f} ms outside them)", flush=True)
            bare_dir = Path(tmp, f"bare-{run}")
            bare_dir.mkdir()
            seconds, count = bare(trainer + artifact_args(bare_dir), bare_dir, same_work_env(bare_dir))
            times["bare"].append(seconds)
            print(f"run {run}  (b) bare            {seconds:6.1f} s  ({count} lines)", flush=True)
    return times, within


def report(times: dict[str, list[float]], bare_label: str) -> None:
    """The medians of both sides, every run, and the ratio against TARGET."""
    medians = {side: statistics.median(values) for side, values in times.items()}
    ratio = medians["operator"] / medians["bare"]
    print(f"\n{'side':<22}{'median s':>10}  runs (s)")
    for side, label in (("operator", "(a) operator path"), ("bare", f"(b) {bare_label}")):
        print(f"{label:<22}{medians[side]:>10.2f}  " + " ".join(f"{t:.1f}" for t in times[side]))
    print(f"{'ratio a/b':<22}{ratio:>10.3f}  target <= {TARGET}: {'met' if ratio <= TARGET else 'NOT met'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each side, alternated (default 5)")
    parser.add_argument("--epochs", type=int, default=5, help="epochs per run (default 5: 4-6 s a run on 2 cores)")
    parser.add_argument("--follow", choices=("sync", "deferred"), default="sync",
                        help="follow as the sync operator does (default) or as its trigger does")
    args = parser.parse_args()
    if not (TRAIN_ENV / "bin" / "horovodrun").exists():
        sys.exit(f"no horovodrun in {TRAIN_ENV}/bin: run `make training-env` first")
    trainer = ["python", "-m", "airflow_ml_provider.runtime.horovod_keras", "--epochs", str(args.epochs)]
    print(f"{RANKS} ranks, {args.epochs} epochs, {args.runs} runs per side; following {args.follow}, operator "
          f"poll_interval {POLL_INTERVAL} s; training env {TRAIN_ENV}")
    horovodrun = ["python", str(HOROVODRUN_MAIN), "-np", str(RANKS), "-H", f"localhost:{RANKS}", "--gloo",
                  "--network-interface", "lo", "--disable-cache"]  # as the job runs it (launcher.launch_plan)
    times, within = alternate(args.runs, "horovod", RANKS, trainer, args.follow,
                              lambda command, cwd, env: run_bare(horovodrun, command, cwd, env))
    report(times, "bare horovodrun")
    ratio = statistics.median(within)
    outside = statistics.median(t - t / w for t, w in zip(times["operator"], within))
    print(f"{'outside (a)':<22}{1000 * outside:>10.0f}  ms, median: the provider's own time around the horovodrun")
    print(f"{'within (a)':<22}{ratio:>10.3f}  median of (a) / the horovodrun inside it (target <= {WITHIN_TARGET}: "
          f"{'met' if ratio <= WITHIN_TARGET else 'NOT met'}): submit, the launcher, the sandbox's start, the end and "
          "following, immune to load that differs between (a) and (b)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
