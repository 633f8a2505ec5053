"""What a preemption costs, and what losing an elastic worker costs, on the local backend (real Horovod).

(1) A fixed-size 2-worker job long enough that training is most of its wall time (the benchmark prints
    the training share, target >= 80%): by default LightGBM (``--rounds`` rounds on a generated set,
    a checkpoint every 10 rounds); ``--trainer horovod`` runs ``horovod_keras`` instead (``--epochs``
    epochs of ``--steps-per-epoch`` steps, a checkpoint per epoch; TensorFlow's start-up is 10-30 s of
    it on a loaded 2-core machine). For each preemption point (25/50/75% of the rounds or epochs, plus
    half a checkpoint interval) the job runs clean, then again with rank 1 SIGKILLed at that point (a
    real worker death), resubmitted as the operator does: resuming from the last checkpoint its log
    reported. The clean run next to each preempted one keeps a shared machine's load drift from passing
    for a saving. Cost of one preemption, as wall time over the clean run:
      resume:  t_killed + t_resumed - t_clean  (start-up again plus the work since the last checkpoint)
      restart: t_killed                          (restarting repeats the clean run: all work so far is lost)
    Resuming should cost about the same at every point, restarting more the later the preemption.
(2) An elastic 3-worker ``horovod_elastic`` job: training steps per second before rank 1 is killed and
    after the job re-formed with 2 workers (timed by when the trainer's metrics lines reach the log).

    AIRFLOW_HOME=/tmp/bench-home .venv/bin/python benchmarks/preemption_cost.py [--trainer lightgbm|horovod] [--no-elastic]

etcd: ``$AIRFLOW_ML_ETCD``, else a private one started with the tests' launcher (Debian etcd-server).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from etcd_server import start_etcd  # noqa: E402
import psutil  # noqa: E402

from airflow_ml_provider.jobs.backends.local import JOB_UID_ENV, LocalBackend  # noqa: E402
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


def fixed_size_job(args: argparse.Namespace, work: Path) -> tuple[str, str, list[str]]:
    """(trainer module, description, argv before the checkpoint directory) of the benchmark's job."""
    if args.trainer == "horovod":
        trainer = "airflow_ml_provider.runtime.horovod_keras"
        return trainer, f"horovod_keras, {args.epochs} epochs x {args.steps_per_epoch} steps", [
            "python", "-m", trainer, "--epochs", str(args.epochs), "--steps-per-epoch", str(args.steps_per_epoch)]
    trainer = "airflow_ml_provider.runtime.lightgbm_trainer"
    data, valid = work / "train.npz", work / "valid.npz"  # metrics every 5 rounds, checkpoints every 10
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

    def clean_run(tag: str) -> tuple[float, float]:
        run = Run(backend, tag, spec(tag))
        wall = run.finish()
        assert backend.status(tag).state is JobState.SUCCEEDED, backend.status(tag)
        return wall, training_share(run, wall)

    print(f"fixed-size {what}, 2 workers; a clean run right before each preempted one (the machine's load drifts)")
    print("  preempted at | clean run (training) | killed after | resumed from | resumed run | resume cost |"
          " restart cost | ratio")
    ratios = {}
    for point in args.points:
        name = f"preempted-{int(point * 100)}"
        clean, share = clean_run(f"clean-{int(point * 100)}")
        preempted = Run(backend, name, spec(name))
        # half a checkpoint interval past the point: the work since the last checkpoint is lost
        kill_at = point * total + interval // 2
        preempted.until(lambda r: r.last("metrics", "step") >= kill_at)
        kill_rank_1(preempted, trainer)
        killed = preempted.finish()
        status = backend.status(name)
        assert status.state is JobState.PREEMPTED, status
        resume = resume_point(preempted)
        again, labels = resubmission(spec(name), {}, 1, resume)
        resumed = Run(backend, name, again, labels).finish()
        assert backend.status(name).state is JobState.SUCCEEDED, backend.status(name)
        resume_cost, restart_cost = killed + resumed - clean, killed
        where = f"step {resume.step}" if resume else "scratch"
        ratios[point] = resume_cost / restart_cost
        print(f"  {100 * point:11.0f}% | {clean:7.1f} s ({100 * share:3.0f}%)     | {killed:10.1f} s | {where:>12s} |"
              f" {resumed:9.1f} s | {resume_cost:9.1f} s | {restart_cost:10.1f} s | {ratios[point]:5.2f}")
    late = [ratio for point, ratio in ratios.items() if point >= 0.5]
    print(f"  resume cheaper than restart at every point >= 50%: {'yes' if late and max(late) < 1 else 'NO'}")


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
    parser.add_argument("--rounds", type=int, default=1500, help="lightgbm: boosting rounds")
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


if __name__ == "__main__":
    main()
