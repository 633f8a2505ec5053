"""What a 4,096-trial search costs per trial beyond its jobs, and how much memory it takes.

The search runs the real loop (``TrialScheduler``: one Optuna ask per free slot, the follow core's
rounds, tell) over Optuna's journal file storage, ``max_parallel`` 64, with a no-op job: it only prints
its objective (``{"event": "result", "auc": x}``, x being a searched parameter). Two measurements:

(1) Orchestration, per sampler: the same loop against an in-process backend whose jobs have already
    finished when submitted, so every second spent is the search's own (ask/tell, journal appends,
    job bookkeeping, follow rounds). ms/trial = wall time / trials; peak RSS of the process that ran
    it (a fresh interpreter per sampler, so each search's memory is its own). Targets: random/grid
    <= 50 ms/trial, TPE <= 200 ms/trial.
(2) On the local backend: the same no-op job as real processes (the job's ``echo``, under the launcher the
    local backend forks for every job, in its sandbox). Cost beyond the jobs = (search wall time -
    wall time of running the jobs' own processes bare, 64 at a time, per job over up to 512 of them) /
    trials, printed with the search process's own CPU time per trial: the rest is the local backend's
    per-job launcher, not the search. With ``--local-trials`` below 4,096 the 4,096-trial wall time is
    a linear extrapolation, printed as such.

    AIRFLOW_HOME=/tmp/bench-home .venv/bin/python benchmarks/search_scale.py [--trials 4096] [--local-trials 4096]

Printed, not asserted: a shared 2-core machine makes any threshold flaky.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OBJECTIVE = '{"event": "result", "auc": {{ params.x }}}'
SPACE = {"x": {"type": "float", "low": 0.0, "high": 1.0}, "y": {"type": "int", "low": 0, "high": 63}}
BARE_SAMPLE = 512  # bare runs measured per trial over at most this many jobs
GRID_SPACE = {"x": [i / 63 for i in range(64)], "y": list(range(64))}  # 4,096 points


def search(root: Path, backend, sampler: str, trials: int, parallel: int) -> dict:
    """Run one search to its budget; wall time and trial counts."""
    from airflow_ml_provider.jobs.naming import JobIdentity
    from airflow_ml_provider.jobs.spec import TrainingJobSpec
    from airflow_ml_provider.search.runner import TrialScheduler, summarize
    from airflow_ml_provider.search.space import parse_settings, parse_space
    from airflow_ml_provider.search.study import open_storage, open_study, study_name

    space = parse_space(GRID_SPACE if sampler == "grid" else SPACE)
    settings = parse_settings(sampler=sampler, n_trials=trials, max_parallel=parallel, seed=0, pruner="none",
                              poll_interval=0.05)
    identity = JobIdentity("bench", f"scale-{sampler}", "run")
    study = open_study(open_storage(f"journal://{root / 'optuna.journal'}"), study_name(identity), settings, space)
    spec = TrainingJobSpec(framework="generic", num_workers=1, command=["echo", OBJECTIVE], env={"Y": "{{ params.y }}"})
    scheduler = TrialScheduler(backend, study, space, settings, lambda name: spec, identity, log=_quiet())
    started, cpu = time.perf_counter(), time.process_time()
    scheduler.run()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    summary = summarize(study)
    return {"sampler": sampler, "trials": len(summary["trials"]), "complete": summary["n_complete"], "wall_s": wall,
            "cpu_s": cpu}


def orchestration(sampler: str, trials: int, parallel: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        result = search(Path(tmp), _instant_backend(), sampler, trials, parallel)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def local(trials: int, parallel: int) -> dict:
    from airflow_ml_provider.jobs.backends.local.backend import LocalBackend

    with tempfile.TemporaryDirectory() as tmp:
        backend = LocalBackend(Path(tmp) / "ml", image=sys.prefix, cancel_grace_s=2)
        result = search(Path(tmp), backend, "random", trials, parallel)
        command = json.loads(next((Path(tmp) / "ml" / "jobs").glob("*/job.json")).read_text())["spec"]["command"]
    print(json.dumps(result), file=sys.stderr, flush=True)  # the search's part, before the bare run
    sample = min(trials, BARE_SAMPLE)
    return {**result, "bare_trials": sample, "job_s": _bare(command, sample, parallel) / sample}


def _bare(command: list[str], trials: int, parallel: int) -> float:
    """Wall time of running the job's own process ``trials`` times, ``parallel`` at a time, with nothing
    around it."""

    def one(_: int) -> None:
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)

    started = time.perf_counter()
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(one, range(trials)))
    return time.perf_counter() - started


def _instant_backend():
    """A backend whose jobs are finished when submitted; a job's log is its command's last argument."""
    from airflow_ml_provider.jobs.backends.base import Backend, JobNotFound
    from airflow_ml_provider.jobs.state import JobState, JobStatus
    from airflow_ml_provider.logs.source import LogBatch, LogLine, LogSource

    class OneLine(LogSource):
        def __init__(self, text: str):
            self.text = text

        def read(self, cursor=None, max_lines: int = 5000) -> LogBatch:
            return LogBatch([] if cursor else [LogLine("rank 0", self.text)], 1)

    class Instant(Backend):
        name = "instant"

        def __init__(self):
            self.jobs: dict[str, str] = {}

        def submit(self, name, spec, labels) -> bool:
            self.jobs[name] = spec.command[-1]
            return True

        def status(self, name) -> JobStatus:
            if name not in self.jobs:
                raise JobNotFound(name)
            return JobStatus(JobState.SUCCEEDED)

        def cancel(self, name) -> None:
            pass

        def delete(self, name) -> None:
            self.jobs.pop(name, None)

        def log_source(self, name) -> LogSource:
            return OneLine(self.jobs[name])

        def render(self, name, spec, labels) -> str:
            return name

    return Instant()


def _quiet():
    import logging

    log = logging.getLogger("search_scale")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    return log


def _child(args: list[str]) -> dict:
    """Run one measurement in a fresh interpreter (its own peak RSS); its last stdout line is the result."""
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=4096)
    parser.add_argument("--parallel", type=int, default=64)
    parser.add_argument("--local-trials", type=int, default=512,
                        help="real jobs on the local backend (4,096 takes ~15 min on a shared 2-core machine); "
                             "0: skip")
    parser.add_argument("--samplers", nargs="+", default=["random", "grid", "tpe"])
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one measurement, print JSON
    args = parser.parse_args()
    if args.one:
        result = (local(args.trials, args.parallel) if args.one == "local"
                  else orchestration(args.one, args.trials, args.parallel))
        print(json.dumps(result))
        return

    import optuna

    print(f"Search at scale: {args.trials} no-op trials, max_parallel {args.parallel}, Optuna {optuna.__version__} "
          "journal storage")
    print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores: wall time includes waiting for them; "
          "CPU ms/trial is the search's own work)")
    print(f"{'sampler':<8} {'trials':>7} {'wall s':>8} {'ms/trial':>9} {'CPU ms/trial':>13} {'peak RSS MB':>12} "
          f"{'target':>10}")
    for sampler in args.samplers:
        r = _child(["--one", sampler, "--trials", str(args.trials), "--parallel", str(args.parallel)])
        target = 200 if sampler == "tpe" else 50
        per = 1000 * r["wall_s"] / r["trials"]
        print(f"{sampler:<8} {r['trials']:>7} {r['wall_s']:>8.1f} {per:>9.1f} {1000 * r['cpu_s'] / r['trials']:>13.1f} "
              f"{r['peak_rss_mb']:>12.0f} "
              f"{'<= ' + str(target) + ' ms':>10} {'ok' if per <= target else 'OVER'}")
    if args.local_trials:
        r = _child(["--one", "local", "--trials", str(args.local_trials), "--parallel", str(args.parallel)])
        n = r["trials"]
        per, job, cpu = 1000 * r["wall_s"] / n, 1000 * r["job_s"], 1000 * r["cpu_s"] / n
        print(f"Local backend, random sampler, {n} real no-op jobs ({r['complete']} complete), max_parallel "
              f"{args.parallel}: {r['wall_s']:.1f} s = {per:.1f} ms/trial; the jobs' own processes bare "
              f"({r['bare_trials']} of them, {args.parallel} at a time): {job:.1f} ms/trial")
        print(f"  cost beyond the jobs: {per - job:.1f} ms/trial, of which the search process's own CPU is "
              f"{cpu:.1f} ms/trial; the rest is the local backend's (a launcher and a sandbox per job)")
        if r["trials"] < args.trials:
            print(f"  (extrapolated to {args.trials} trials, linearly: {r['wall_s'] * args.trials / r['trials']:.0f} s)")


if __name__ == "__main__":
    main()
