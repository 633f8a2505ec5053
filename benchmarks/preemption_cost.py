"""What a preemption costs, and what losing an elastic worker costs, on the local backend (real Horovod,
real torchrun).

(1) A fixed-size 2-worker job long enough that training is most of its wall time (a clean run first
    prints the training share, target >= 80%): by default LightGBM (``--rounds`` rounds on a generated
    set, metrics every 5 rounds, a checkpoint every 10); ``--trainer horovod`` runs ``horovod_keras``
    instead (``--epochs`` epochs of ``--steps-per-epoch`` steps, metrics and a checkpoint per epoch), and
    ``--trainer pytorch`` ``torch_ddp`` under torchrun (``--epochs`` epochs over ``--rows`` generated
    rows, metrics and a checkpoint per epoch).
    For each preemption point (25/50/75% of the rounds or epochs) the job runs until half a checkpoint
    interval past its last checkpoint (a round it logs; for an epoch trainer half the clean run's epoch
    time after the checkpoint's line), rank 1 is SIGKILLed (a real worker death) and the job is
    resubmitted as the operator does: resuming from the last checkpoint its log reported.
    A preemption's cost is how much later the job reaches round ``m``, the first round the resubmitted
    attempt logs, than it did (or, past the kill, would have) without it:
      resume:  t2(m) - t1(m)   m's line from the resumed attempt minus m's line from the killed one
                               (extrapolated at the killed attempt's own pace if it never got to m)
      restart: s2 - s1         a restarted job replays the killed attempt from its start s1 at s2
    Both come from one preempted job's own log lines, so the machine's load drifting between separate
    runs does not enter them (as it does a clean run subtracted from a preempted one). The resume cost
    is three measured spans: the rounds past m until the killed attempt ended, plus resubmitting (an
    epoch trainer's m lies past the kill: then it is resubmitting less the rest of epoch m);
    start-up (the launcher, Python, imports, data, the checkpoint; up to the trainer's ``resumed``
    line); and the trainer up to round m again: LightGBM's network, the datasets, the rounds since the
    checkpoint and, for a worker without saved scores, re-scoring its rows with every tree so far
    (``from (scores)``: the checkpoint's round, then how many workers restored their scores of how many
    had saved them for it; one killed between the round and its scores file re-scores). Resuming should
    then cost about the same at every point, and restarting more the later the preemption. For LightGBM the same resumption
    runs once more, up to round m, from a copy of the checkpoint without the scores files: "re-scoring
    instead" is the resume cost with that run's last span in place of the third (the only work that
    differs): resuming the way LightGBM's ``init_model`` does.
(2) An elastic 3-worker ``horovod_elastic`` job: training steps per second before rank 1 is killed and
    after the job re-formed with 2 workers (timed by when the trainer's metrics lines reach the log).
    With ``--trainer pytorch`` instead: the same job as (1), elastic (``--nnodes 1:2``), rank 1 killed at
    each point; torchrun re-forms the group within the job and the trainer resumes from its newest
    checkpoint. Its costs are (1)'s, the re-formed group standing for the resubmitted attempt: it starts
    when its rank 0's process does (the killed group: when its own did).

    AIRFLOW_HOME=/tmp/bench-home .venv/bin/python benchmarks/preemption_cost.py [--trainer lightgbm|horovod|pytorch]
        [--no-elastic] [--no-fixed] [--job-timeout S]

Progress (each job submitted, each kill, each job's end, with the seconds since the start) goes to stderr;
a job that has not ended ``--job-timeout`` seconds after its submission is cancelled and the benchmark
stops naming it and its state, so a stuck job costs minutes, not a CI run.

etcd (Horovod's elastic job): ``$AIRFLOW_ML_ETCD``, else a private one started with the tests' launcher
(Debian etcd-server).
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

from etcd_server import start_etcd  # noqa: E402

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend  # noqa: E402
from airflow_ml_provider.jobs.follow import ResumePoint  # noqa: E402
from airflow_ml_provider.jobs.preemption import resubmission  # noqa: E402
from airflow_ml_provider.jobs.spec import TrainingJobSpec  # noqa: E402
from airflow_ml_provider.jobs.state import JobState  # noqa: E402
from airflow_ml_provider.logs.metrics import metric_position  # noqa: E402
from airflow_ml_provider.runtime.datasets import write_synthetic  # noqa: E402
from airflow_ml_provider.runtime.lightgbm_trainer import scores_files  # noqa: E402
from support import rank_process  # noqa: E402

TRAIN_ENV = REPO / ".venv-train"
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}
TORCH_DDP = "airflow_ml_provider.runtime.torch_ddp"
# the variable holding a trainer process's rank: what its launcher (ours, horovodrun, torchrun) sets
RANK_ENV = {"airflow_ml_provider.runtime.lightgbm_trainer": "AIRFLOW_ML_RANK", TORCH_DDP: "RANK",
            "airflow_ml_provider.runtime.horovod_keras": "HOROVOD_RANK",
            "airflow_ml_provider.runtime.horovod_elastic": "HOROVOD_RANK"}


STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - STARTED:7.1f} s] {message}", file=sys.stderr, flush=True)


class Run:
    """Follows one local job's log, stamping each structured line with when it arrived."""

    timeout_s = 900.0  # --job-timeout: from submission to the job's end

    def __init__(self, backend: LocalBackend, name: str, spec: TrainingJobSpec, labels: dict | None = None):
        self.backend, self.name, self.events, self._offset = backend, name, [], 0
        self.start = time.perf_counter()
        backend.submit(name, spec, labels or {})
        progress(f"submitted {name}")

    def poll(self) -> bool:
        """Read new lines; True once the job has ended (and its log has been read to the end)."""
        self.backend.heartbeat(self.name)  # a follower's lease: a job no one follows is stopped as orphaned
        done = self.backend.status(self.name).state.is_terminal
        log = self.backend.job_dir(self.name) / "output.log"
        if log.exists():
            with log.open("rb") as f:  # offsets in bytes: torchrun's failure summary is not ASCII
                f.seek(self._offset)
                for line in f:
                    if not line.endswith(b"\n"):
                        break
                    self._offset += len(line)
                    text = line.decode(errors="replace").partition("] ")[2]
                    if text.startswith("{"):
                        self.events.append((time.perf_counter(), json.loads(text)))
        return done

    def until(self, predicate) -> float:
        while not self.poll():
            if predicate(self):
                return time.perf_counter()
            self._within_time()
        raise SystemExit(f"job {self.name} ended ({self.backend.status(self.name).message}) before the chaos")

    def finish(self) -> float:
        while not self.poll():
            self._within_time()
        wall = time.perf_counter() - self.start
        progress(f"{self.name} ended {self.backend.status(self.name).state.value} after {wall:.1f} s")
        return wall

    def _within_time(self) -> None:
        """Sleep a poll interval; past the job's time, cancel it and stop the benchmark naming it."""
        if time.perf_counter() - self.start > self.timeout_s:
            status = self.backend.status(self.name)
            self.backend.cancel(self.name)
            raise SystemExit(f"job {self.name} still {status.state.value} after {self.timeout_s:.0f} s "
                             f"(--job-timeout): cancelled; last events: {[e['event'] for _, e in self.events[-5:]]}")
        time.sleep(0.05)

    def last(self, kind: str, field: str) -> int:
        return max((e[field] for _, e in self.events if e["event"] == kind and field in e), default=0)


def kill_rank_1(run: Run, trainer: str) -> int:
    """SIGKILL the user's process of rank 1 (tests/support.py's rank_process: the job's uid, the rank its
    launcher gave it); returns the pid of rank 0's process at that moment (an elastic group's restart
    replaces it)."""
    job_dir, rank_env = run.backend.job_dir(run.name), RANK_ENV[trainer]
    victim, survivor = rank_process(job_dir, 1, trainer, rank_env), rank_process(job_dir, 0, trainer, rank_env)
    if victim is None or survivor is None:
        raise SystemExit(f"job {run.name}: no rank 1 (or rank 0) process of {trainer} to kill")
    victim.send_signal(signal.SIGKILL)
    progress(f"killed rank 1 of {run.name} (pid {victim.pid})")
    return survivor.pid


def rank_0_started(run: Run, trainer: str, not_pid: int | None = None) -> float:
    """When rank 0's trainer process (other than ``not_pid``) started, on the events' clock (perf_counter)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        proc = rank_process(run.backend.job_dir(run.name), 0, trainer, RANK_ENV[trainer])
        if proc is not None and proc.pid != not_pid:
            return proc.create_time() - time.time() + time.perf_counter()
        run.poll()
        time.sleep(0.02)
    raise SystemExit(f"job {run.name}: rank 0's process of {trainer} never (re)started")


def training_share(run: Run, wall: float) -> float:
    """Share of the wall time spent in epochs: the span of the epoch lines plus one epoch (the first)."""
    times = [t for t, e in run.events if e["event"] == "metrics"]
    return (times[-1] - times[0] + pace(run.events)) / wall


def pace(events: list) -> float:
    """Seconds per logged round (epoch): the mean gap between the metrics lines."""
    times = [t for t, e in events if e["event"] == "metrics"]
    return (times[-1] - times[0]) / max(1, len(times) - 1)


def resume_point(run: Run) -> ResumePoint | None:
    """The newest checkpoint the killed attempt reported (what the follow core hands the next attempt)."""
    points = [e for _, e in run.events if e["event"] == "checkpoint"]
    return ResumePoint(points[-1]["path"], points[-1].get("step"), points[-1].get("epoch")) if points else None


def logged_at(events: list, step: int, fallback_s: float) -> float:
    """When ``events`` logged the metrics of ``step``; past their last line, extrapolated at their own pace
    (``fallback_s`` per round where they logged one line only)."""
    times = sorted({metric_position(e): t for t, e in events if e["event"] == "metrics"}.items())
    if step in dict(times):
        return dict(times)[step]
    (s1, t1) = times[-1]
    assert step > s1, (step, times)
    (s0, t0) = times[-2] if len(times) > 1 else (s1 - 1, t1 - fallback_s)
    return t1 + (step - s1) * (t1 - t0) / (s1 - s0)


def fixed_size_job(args: argparse.Namespace, work: Path) -> tuple[str, str, list[str]]:
    """(trainer module, description, argv before the checkpoint directory) of the benchmark's job."""
    if args.trainer == "horovod":
        trainer = "airflow_ml_provider.runtime.horovod_keras"
        return trainer, f"horovod_keras, {args.epochs} epochs x {args.steps_per_epoch} steps", [
            "python", "-m", trainer, "--epochs", str(args.epochs), "--steps-per-epoch", str(args.steps_per_epoch)]
    data, valid = work / "ml" / "data" / "train.npz", work / "ml" / "data" / "valid.npz"  # the backend's data dir
    write_synthetic(data, valid, rows=args.rows, features=20, seed=0)
    if args.trainer == "pytorch":
        return TORCH_DDP, f"torch_ddp (torchrun), {args.epochs} epochs on {args.rows:,} x 20", [
            "python", "-m", TORCH_DDP, "--epochs", str(args.epochs), "--train-data", str(data),
            "--test-data", str(valid)]
    trainer = "airflow_ml_provider.runtime.lightgbm_trainer"
    return trainer, f"lightgbm, {args.rounds} rounds on {args.rows:,} x 20", [
        "python", "-m", trainer, "--train-data", str(data), "--valid-data", str(valid),
        "--num-boost-round", str(args.rounds), "--log-every", "5", "--checkpoint-every", "10",
        "--params-json", json.dumps({"num_leaves": 63, "learning_rate": 0.05, "seed": 0})]


def kill_past_checkpoint(run: Run, trainer: str, checkpoint: int, interval: int, epoch_s: float) -> int:
    """Kill rank 1 half a checkpoint interval past the checkpoint of round (epoch) ``checkpoint``: the work
    since it is lost. Rounds are logged within an interval; an epoch trainer logs once per checkpoint, so
    its kill comes half an epoch (``epoch_s``, the clean run's pace) after that checkpoint's line."""
    if interval > 1:
        run.until(lambda r: r.last("metrics", "step") >= checkpoint + interval // 2)
    else:
        run.until(lambda r: r.last("checkpoint", "epoch") >= checkpoint)
        done = time.perf_counter() + epoch_s / 2
        run.until(lambda r: time.perf_counter() >= done)
    return kill_rank_1(run, trainer)


def costs(killed: list, s1: float, resumed: list, s2: float, pace_s: float) -> tuple[float, tuple[float, float, float]]:
    """``(restart cost, resume cost's spans)`` of one preemption (see the module's docstring): ``killed``
    and ``resumed`` are the two attempts' (or an elastic job's two groups') stamped events, ``s1``/``s2``
    when each started (a resubmitted attempt: its submission; a re-formed group: its rank 0's process).
    The first span is negative where round m lies past the kill (the killed attempt would have logged it
    later than the next one started)."""
    [at_resumed] = [t for t, e in resumed if e["event"] == "resumed" and e["rank"] == 0]
    after = [(metric_position(e), t) for t, e in resumed if e["event"] == "metrics"]
    if not after:
        raise SystemExit("the resumed attempt had no round left to train: the kill came after the last checkpoint "
                         "(a loaded machine slows the kill more than the job; give the job more rounds or epochs)")
    m, at_m = after[0]
    return s2 - s1, (s2 - logged_at(killed, m, pace_s), at_resumed - s2, at_m - at_resumed)


def row(point: float, start: str, restart_cost: float, spans: tuple[float, float, float], instead: str = "-") -> float:
    """Print one preemption point's row; returns resume / restart."""
    ratio = sum(spans) / restart_cost
    resume_cost = f"{sum(spans):4.1f} s = " + " + ".join(f"{span:.1f}" for span in spans) + " s"
    print(f"  {100 * point:11.0f}% | {start:>13s} | {restart_cost:10.1f} s | {resume_cost:28s} | {ratio:16.2f} |"
          f" {instead}")
    return ratio


HEADER = ("  preempted at | from (scores) | restart cost | resume cost                  | resume / restart"
          " | re-scoring instead: cost, / restart")


def verdict(ratios: dict[float, float]) -> None:
    late = [ratio for point, ratio in ratios.items() if point >= 0.5]
    by_point = [ratio for _, ratio in sorted(ratios.items())]
    trend = "" if len(by_point) < 2 else \
        f"; relatively cheaper at the last point than at the first: {'yes' if by_point[-1] < by_point[0] else 'NO'}"
    print(f"  resume cheaper than restart at every point >= 50%: {'yes' if late and max(late) < 1 else 'NO'}{trend}")


def fixed_spec(args: argparse.Namespace, work: Path, command: list[str], tag: str) -> TrainingJobSpec:
    """(1)'s 2-worker job, its checkpoints and model under ``work/tag``."""
    return TrainingJobSpec(framework=args.trainer, num_workers=2, env=ENV, command=command,
                           checkpoint_dir=str(work / tag), model_dir=str(work / tag / "model"))


def clean_run(backend: LocalBackend, work: Path, args: argparse.Namespace, job: tuple[str, str, list[str]]) -> float:
    """(1)'s job without a preemption: prints its wall time and training share; returns its seconds per
    round (epoch), which times the kills of an epoch trainer."""
    _, what, command = job
    clean = Run(backend, "clean", fixed_spec(args, work, command, "clean"))
    wall = clean.finish()
    assert backend.status("clean").state is JobState.SUCCEEDED, backend.status("clean")
    print(f"fixed-size {what}, 2 workers: a clean run takes {wall:.1f} s, {100 * training_share(clean, wall):.0f}%"
          " of it training")
    return pace(clean.events)


def preemption_overhead(backend: LocalBackend, work: Path, args: argparse.Namespace,
                        job: tuple[str, str, list[str]], pace_s: float) -> None:
    """Runs (1) with ``job`` (fixed_size_job's), ``pace_s`` the clean run's seconds per round (epoch)."""
    trainer, _, command = job
    total, interval = (args.rounds, 10) if args.trainer == "lightgbm" else (args.epochs, 1)

    def spec(tag: str) -> TrainingJobSpec:
        return fixed_spec(args, work, command, tag)

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

    print("cost of a preemption: how much later the job logs round m (the resubmitted attempt's first) than"
          " without it; resuming = the rounds past m + resubmitting, start-up, up to m again")
    print(HEADER)
    ratios = {}
    for point in args.points:
        name = f"preempted-{int(point * 100)}"
        first = Run(backend, name, spec(name))
        kill_past_checkpoint(first, trainer, int(point * total) // interval * interval, interval, pace_s)
        first.finish()
        assert backend.status(name).state is JobState.PREEMPTED, backend.status(name)
        resume = resume_point(first)
        assert resume, f"{name}: no checkpoint before the kill"
        alone = booster_alone(name, resume) if args.trainer == "lightgbm" else None
        saved = sum(Path(scores_files(str(Path(resume.path).parent), rank, 2).path(resume.step)).exists()
                    for rank in range(2)) if args.trainer == "lightgbm" else 0
        again, labels = resubmission(spec(name), {}, 1, resume)
        second = Run(backend, name, again, labels)
        second.finish()
        assert backend.status(name).state is JobState.SUCCEEDED, backend.status(name)
        restart_cost, spans = costs(first.events, first.start, second.events, second.start, pace_s)
        instead, start = "-", f"epoch {resume.epoch}"
        if args.trainer == "lightgbm":
            restored = sum(e["event"] == "scores_restored" for _, e in second.events)
            third = rescoring(name, alone)
            rescored = spans[0] + spans[1] + third
            instead = f"{rescored:5.1f} s (up to m {third:.1f} s), {rescored / restart_cost:4.2f}"
            start = f"{resume.step} ({restored}/{saved})"
        ratios[point] = row(point, start, restart_cost, spans, instead)
    verdict(ratios)


def elastic_restart(backend: LocalBackend, work: Path, args: argparse.Namespace, command: list[str],
                    epoch_s: float) -> None:
    """(2) for PyTorch: a 2-worker elastic job (``--nnodes 1:2``) whose rank 1 is killed at each point; torchrun
    re-forms the group in the same job and the trainer resumes from its newest checkpoint. The same costs
    as (1), where the second attempt is the re-formed group, started when its rank 0's process started."""
    print("elastic torch_ddp, 2 workers (--nnodes 1:2), rank 1 killed; torchrun re-forms the group in the job:")
    print(HEADER)
    ratios = {}
    for point in args.points:
        name = f"elastic-{int(point * 100)}"
        spec = TrainingJobSpec(framework="pytorch", num_workers=2, min_workers=1, max_workers=2, env=ENV,
                               command=command, checkpoint_dir=str(work / name), model_dir=str(work / name / "model"))
        run = Run(backend, name, spec)
        s1 = rank_0_started(run, TORCH_DDP)
        survivor = kill_past_checkpoint(run, TORCH_DDP, int(point * args.epochs), 1, epoch_s)
        s2 = rank_0_started(run, TORCH_DDP, not_pid=survivor)
        run.finish()
        assert backend.status(name).state is JobState.SUCCEEDED, backend.status(name)
        # the killed group's lines all come before the re-formed group's first (its ranks' ``resumed``)
        split = next(i for i, (_, e) in enumerate(run.events) if e["event"] == "resumed")
        restart_cost, spans = costs(run.events[:split], s1, run.events[split:], s2, epoch_s)
        [resumed] = [e for _, e in run.events[split:] if e["event"] == "resumed" and e["rank"] == 0]
        ratios[point] = row(point, f"epoch {resumed['epoch']}", restart_cost, spans)
    verdict(ratios)


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
    after = [(t, metric_position(e)) for t, e in run.events if e["event"] == "metrics" and t > t_reformed]
    (t_first, s_first), (t_last, s_last) = after[0], after[-1]
    before_rate = (step_kill - step_from) / (t_kill - t_from)
    after_rate = (s_last - s_first) / (t_last - t_first)
    print(f"elastic, {steps} steps, 3 -> 2 workers (rolled back to step {change['step']}):")
    print(f"  {before_rate:.1f} steps/s with 3 workers, {after_rate:.1f} steps/s with 2 "
          f"(ratio {after_rate / before_rate:.2f}); re-forming took {t_reformed - t_kill:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainer", choices=["lightgbm", "horovod", "pytorch"], default="lightgbm")
    parser.add_argument("--rows", type=int, default=100_000, help="lightgbm, pytorch: generated rows")
    parser.add_argument("--rounds", type=int, default=2000, help="lightgbm: boosting rounds")
    parser.add_argument("--epochs", type=int, default=8, help="horovod, pytorch: epochs")
    parser.add_argument("--steps-per-epoch", type=int, default=4000, help="horovod: steps per epoch")
    parser.add_argument("--points", type=float, nargs="+", default=[0.25, 0.5, 0.75],
                        help="preemption points, as shares of the job's rounds (epochs)")
    parser.add_argument("--elastic-steps", type=int, default=600)
    parser.add_argument("--no-elastic", action="store_true", help="skip (2)")
    parser.add_argument("--no-fixed", action="store_true",
                        help="skip (1)'s preempted runs (its clean run still times (2)'s kills)")
    parser.add_argument("--job-timeout", type=float, default=Run.timeout_s,
                        help="seconds a job may take from its submission before the benchmark gives up on it")
    args = parser.parse_args()
    Run.timeout_s = args.job_timeout
    work = Path(tempfile.mkdtemp(prefix="preemption-cost-"))
    horovod_elastic = not args.no_elastic and args.trainer != "pytorch"  # torchrun's rendezvous needs no etcd
    server = start_etcd() if horovod_elastic and not os.environ.get("AIRFLOW_ML_ETCD") else None
    try:
        backend = LocalBackend(work / "ml", image=str(TRAIN_ENV),
                               etcd=os.environ.get("AIRFLOW_ML_ETCD") or (server and server.endpoint))
        job = fixed_size_job(args, work)
        epoch_s = clean_run(backend, work, args, job)
        if not args.no_fixed:
            preemption_overhead(backend, work, args, job, epoch_s)
        if horovod_elastic:
            elastic_throughput(backend, work, args.elastic_steps)
        elif not args.no_elastic:
            elastic_restart(backend, work, args, job[2], epoch_s)
    finally:
        if server:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)  # every job's checkpoints: gigabytes


if __name__ == "__main__":
    main()
