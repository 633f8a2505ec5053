"""What a preemption costs, and what losing an elastic worker costs, on the local backend (real Horovod).

(1) A fixed-size 2-worker job long enough that training is most of its wall time (a clean run first
    prints the training share, target >= 80%): by default LightGBM (``--rounds`` rounds on a generated
    set, metrics every 5 rounds, a checkpoint every 10); ``--trainer horovod`` runs ``horovod_keras``
    instead (``--epochs`` epochs of ``--steps-per-epoch`` steps, metrics and a checkpoint per epoch).
    For each preemption point (25/50/75% of the rounds or epochs) the job runs until it logs the round
    half a checkpoint interval past its last checkpoint, rank 1 is SIGKILLed (a real worker death) and
    the job is resubmitted as the operator does: resuming from the last checkpoint its log reported.
    A preemption's cost is how much later the job reaches round ``m``, the first round the resubmitted
    attempt logs, than it did (or, past the kill, would have) without it:
      resume:  t2(m) - t1(m)   m's line from the resumed attempt minus m's line from the killed one
                               (extrapolated at the killed attempt's own pace if it never got to m)
      restart: s2 - s1         a restarted job replays the killed attempt from its start s1 at s2
    Both come from one preempted job's own log lines, so the machine's load drifting between separate
    runs does not enter them (as it does a clean run subtracted from a preempted one). The resume cost
    is three measured spans: the rounds past m until the killed attempt ended, plus resubmitting;
    start-up (the launcher, Python, imports, data, the checkpoint; up to the trainer's ``resumed``
    line); and the trainer up to round m again: LightGBM's network, the datasets, the rounds since the
    checkpoint and, for a worker without saved scores, re-scoring its rows with every tree so far
    (``from (scores)`` counts the workers that restored theirs). Resuming should then cost about the
    same at every point, and restarting more the later the preemption. For LightGBM the same resumption
    runs once more, up to round m, from a copy of the checkpoint without the scores files: "re-scoring
    instead" is the resume cost with that run's last span in place of the third (the only work that
    differs): resuming the way LightGBM's ``init_model`` does.
(2) An elastic 3-worker ``horovod_elastic`` job: training steps per second before rank 1 is killed and
    after the job re-formed with 2 workers (timed by when the trainer's metrics lines reach the log).

    AIRFLOW_HOME=/tmp/bench-home .venv/bin/python benchmarks/preemption_cost.py [--trainer lightgbm|horovod] [--no-elastic]

etcd: ``$AIRFLOW_ML_ETCD``, else a private one started with the tests' launcher (Debian etcd-server).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import psutil  # noqa: E402
from etcd_server import start_etcd  # noqa: E402

from airflow_ml_provider.jobs.backends.local.backend import JOB_UID_ENV, LocalBackend  # noqa: E402
from airflow_ml_provider.jobs.follow import ResumePoint  # noqa: E402
from airflow_ml_provider.jobs.preemption import resubmission  # noqa: E402
from airflow_ml_provider.jobs.spec import TrainingJobSpec  # noqa: E402
from airflow_ml_provider.jobs.state import JobState  # noqa: E402
from airflow_ml_provider.runtime.datasets import write_synthetic  # noqa: E402

TRAIN_ENV = REPO / ".venv-train"
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}


class Run:
    """Follows one local job's log, stamping each structured line with when it arrived."""

    def __init__(self, backend: LocalBackend, name: str, spec: TrainingJobSpec, labels: dict | None = None):
        self.backend, self.name, self.events, self._offset = backend, name, [], 0
        self.start = time.perf_counter()
        backend.submit(name, spec, labels or {})

    def poll(self) -> bool:
        """Read new lines; True once the job has ended (and its log has been read to the end)."""
        done = self.backend.status(self.name).state.is_terminal
        log = self.backend.job_dir(self.name) / "output.log"
        if log.exists():
            with log.open() as f:
                f.seek(self._offset)
                for line in f:
                    if not line.endswith("\n"):
                        break
                    self._offset += len(line)
                    text = line.partition("] ")[2]
                    if text.startswith("{"):
                        self.events.append((time.perf_counter(), json.loads(text)))
        return done

    def until(self, predicate) -> float:
        while not self.poll():
            if predicate(self):
                return time.perf_counter()
            time.sleep(0.05)
        raise SystemExit(f"job {self.name} ended ({self.backend.status(self.name).message}) before the chaos")

    def finish(self) -> float:
        while not self.poll():
            time.sleep(0.05)
        return time.perf_counter() - self.start

    def last(self, kind: str, field: str) -> int:
        return max((e[field] for _, e in self.events if e["event"] == kind and field in e), default=0)


def kill_rank_1(run: Run, trainer: str) -> None:
    """SIGKILL the user's process of rank 1 (found by the job's uid and the rank its launcher gave it)."""
    uid = json.loads((run.backend.job_dir(run.name) / "job.json").read_text())["uid"]
    for proc in psutil.process_iter():
        try:
            env, cmdline = proc.environ(), proc.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        rank = env.get("HOROVOD_RANK", env.get("AIRFLOW_ML_RANK"))
        if env.get(JOB_UID_ENV) == uid and rank == "1" and trainer in cmdline:
            proc.send_signal(signal.SIGKILL)
            return
    raise SystemExit(f"job {run.name}: no rank 1 process of {trainer} to kill")


def training_share(run: Run, wall: float) -> float:
    """Share of the wall time spent in epochs: the span of the epoch lines plus one epoch (the first)."""
    times = [t for t, e in run.events if e["event"] == "metrics"]
    epoch = (times[-1] - times[0]) / max(1, len(times) - 1)
    return (times[-1] - times[0] + epoch) / wall


def resume_point(run: Run) -> ResumePoint | None:
    """The newest checkpoint the killed attempt reported (what the follow core hands the next attempt)."""
    points = [e for _, e in run.events if e["event"] == "checkpoint"]
    return ResumePoint(points[-1]["path"], points[-1].get("step"), points[-1].get("epoch")) if points else None


def logged_at(run: Run, step: int) -> float:
    """When ``run`` logged the metrics of ``step``; past its last line, extrapolated at its own pace."""
    times = {e["step"]: t for t, e in run.events if e["event"] == "metrics"}
    if step in times:
        return times[step]
    (s0, t0), (s1, t1) = sorted(times.items())[-2:]
    assert step > s1, (step, sorted(times))
    return t1 + (step - s1) * (t1 - t0) / (s1 - s0)


def fixed_size_job(args: argparse.Namespace, work: Path) -> tuple[str, str, list[str]]:
    """(trainer module, description, argv before the checkpoint directory) of the benchmark's job."""
    if args.trainer == "horovod":
        trainer = "airflow_ml_provider.runtime.horovod_keras"
        return trainer, f"horovod_keras, {args.epochs} epochs x {args.steps_per_epoch} steps", [
            "python", "-m", trainer, "--epochs", str(args.epochs), "--steps-per-epoch", str(args.steps_per_epoch)]
    trainer = "airflow_ml_provider.runtime.lightgbm_trainer"
    data, valid = work / "ml" / "data" / "train.npz", work / "ml" / "data" / "valid.npz"  # the backend's data dir
    write_synthetic(data, valid, rows=args.rows, features=20, seed=0)
    return trainer, f"lightgbm, {args.rounds} rounds on {args.rows:,} x 20", [
        "python", "-m", trainer, "--train-data", str(data), "--valid-data", str(valid),
        "--num-boost-round", str(args.rounds), "--log-every", "5", "--checkpoint-every", "10",
        "--params-json", json.dumps({"num_leaves": 63, "learning_rate": 0.05, "seed": 0})]


def preemption_overhead(backend: LocalBackend, work: Path, args: argparse.Namespace) -> None:
    trainer, what, command = fixed_size_job(args, work)
    total, interval = (args.epochs, 1) if args.trainer == "horovod" else (args.rounds, 10)
    framework = "horovod" if args.trainer == "horovod" else "lightgbm"

    def spec(tag: str) -> TrainingJobSpec:
        return TrainingJobSpec(framework=framework, num_workers=2, env=ENV, command=command,
                               checkpoint_dir=str(work / tag), model_dir=str(work / tag / "model"))

    def booster_alone(name: str, resume: ResumePoint) -> ResumePoint:
        """A copy of the checkpoint without the workers' scores files, taken before the resumed attempt
        runs (its newer checkpoints retire this one: trainers keep the newest three)."""
        (work / f"{name}-rescoring").mkdir()
        return ResumePoint(shutil.copy(resume.path, work / f"{name}-rescoring"), resume.step, resume.epoch)

    def rescoring(name: str, checkpoint: ResumePoint) -> float:
        """The trainer's time up to round m in the same resumption from ``checkpoint`` (see booster_alone),
        where every worker re-scores its rows."""
        tag = f"{name}-rescoring"
        again, labels = resubmission(spec(tag), {}, 1, checkpoint)
        run = Run(backend, tag, again, labels)
        at_m = run.until(lambda r: r.last("metrics", "step") > 0)
        backend.cancel(tag)
        [resumed] = [t for t, e in run.events if e["event"] == "resumed" and e["rank"] == 0]
        return at_m - resumed

    clean = Run(backend, "clean", spec("clean"))
    wall = clean.finish()
    assert backend.status("clean").state is JobState.SUCCEEDED, backend.status("clean")
    print(f"fixed-size {what}, 2 workers: a clean run takes {wall:.1f} s, {100 * training_share(clean, wall):.0f}%"
          " of it training")
    print("cost of a preemption: how much later the job logs round m (the resubmitted attempt's first) than"
          " without it; resuming = the rounds past m + resubmitting, start-up, up to m again")
    print("  preempted at | from (scores) | restart cost | resume cost                  | resume / restart"
          " | re-scoring instead: cost, / restart")
    ratios = {}
    for point in args.points:
        name = f"preempted-{int(point * 100)}"
        first = Run(backend, name, spec(name))
        # half a checkpoint interval past a checkpoint: the work since it is lost
        kill_at = int(point * total) // interval * interval + interval // 2
        first.until(lambda r: r.last("metrics", "step") >= kill_at)
        kill_rank_1(first, trainer)
        first.finish()
        assert backend.status(name).state is JobState.PREEMPTED, backend.status(name)
        resume = resume_point(first)
        assert resume, f"{name}: no checkpoint before the kill"
        alone = booster_alone(name, resume) if args.trainer == "lightgbm" else None
        again, labels = resubmission(spec(name), {}, 1, resume)
        second = Run(backend, name, again, labels)
        second.finish()
        assert backend.status(name).state is JobState.SUCCEEDED, backend.status(name)
        [resumed] = [t for t, e in second.events if e["event"] == "resumed" and e["rank"] == 0]
        restored = sum(e["event"] == "scores_restored" for _, e in second.events)
        m, at_m = next((e["step"], t) for t, e in second.events if e["event"] == "metrics")
        before = logged_at(first, m)
        restart_cost, spans = second.start - first.start, (second.start - before, resumed - second.start, at_m - resumed)
        ratios[point] = sum(spans) / restart_cost
        instead = "-"
        if args.trainer == "lightgbm":
            third = rescoring(name, alone)
            rescored = spans[0] + spans[1] + third
            instead = f"{rescored:5.1f} s (up to m {third:.1f} s), {rescored / restart_cost:4.2f}"
        resume_cost = f"{sum(spans):4.1f} s = " + " + ".join(f"{span:.1f}" for span in spans) + " s"
        print(f"  {100 * point:11.0f}% | {f'{resume.step} ({restored}/2)':>13s} | {restart_cost:10.1f} s |"
              f" {resume_cost:28s} | {ratios[point]:16.2f} | {instead}")
    late = [ratio for point, ratio in ratios.items() if point >= 0.5]
    (_, earliest), *_, (_, latest) = sorted(ratios.items())
    print(f"  resume cheaper than restart at every point >= 50%: {'yes' if late and max(late) < 1 else 'NO'};"
          f" relatively cheaper at the last point than at the first: {'yes' if latest < earliest else 'NO'}")


def elastic_throughput(backend: LocalBackend, work: Path, steps: int) -> None:
    trainer = "airflow_ml_provider.runtime.horovod_elastic"
    spec = TrainingJobSpec(framework="horovod", num_workers=3, min_workers=1, max_workers=3, env=ENV,
                           checkpoint_dir=str(work / "elastic"), command=["python", "-m", trainer, "--total-steps",
                                                                          str(steps), "--log-every", "10"])
    run = Run(backend, "elastic", spec)
    t_from = run.until(lambda r: r.last("metrics", "step") >= 20)
    step_from = run.last("metrics", "step")
    t_kill = run.until(lambda r: r.last("metrics", "step") >= steps // 2)
    step_kill = run.last("metrics", "step")
    kill_rank_1(run, trainer)
    run.finish()
    assert backend.status("elastic").state is JobState.SUCCEEDED, backend.status("elastic")
    [(t_reformed, change)] = [(t, e) for t, e in run.events if e["event"] == "membership"]
    after = [(t, e["step"]) for t, e in run.events if e["event"] == "metrics" and t > t_reformed]
    (t_first, s_first), (t_last, s_last) = after[0], after[-1]
    before_rate = (step_kill - step_from) / (t_kill - t_from)
    after_rate = (s_last - s_first) / (t_last - t_first)
    print(f"elastic, {steps} steps, 3 -> 2 workers (rolled back to step {change['step']}):")
    print(f"  {before_rate:.1f} steps/s with 3 workers, {after_rate:.1f} steps/s with 2 "
          f"(ratio {after_rate / before_rate:.2f}); re-forming took {t_reformed - t_kill:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainer", choices=["lightgbm", "horovod"], default="lightgbm")
    parser.add_argument("--rows", type=int, default=100_000, help="lightgbm: generated rows")
    parser.add_argument("--rounds", type=int, default=2000, help="lightgbm: boosting rounds")
    parser.add_argument("--epochs", type=int, default=8, help="horovod: epochs")
    parser.add_argument("--steps-per-epoch", type=int, default=4000, help="horovod: steps per epoch")
    parser.add_argument("--points", type=float, nargs="+", default=[0.25, 0.5, 0.75],
                        help="preemption points, as shares of the job's rounds (epochs)")
    parser.add_argument("--elastic-steps", type=int, default=600)
    parser.add_argument("--no-elastic", action="store_true", help="skip (2)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="preemption-cost-"))
    server = None if args.no_elastic or os.environ.get("AIRFLOW_ML_ETCD") else start_etcd()
    try:
        backend = LocalBackend(work / "ml", image=str(TRAIN_ENV),
                               etcd=os.environ.get("AIRFLOW_ML_ETCD") or (server and server.endpoint))
        preemption_overhead(backend, work, args)
        if not args.no_elastic:
            elastic_throughput(backend, work, args.elastic_steps)
    finally:
        if server:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)  # every job's checkpoints: gigabytes


if __name__ == "__main__":
    main()
