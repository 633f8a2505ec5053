"""What a preemption costs, and what losing an elastic worker costs, on the local backend (real Horovod).

(1) A fixed-size 2-rank ``horovod_keras`` job of ``--epochs`` epochs, run clean; then run again and
    SIGKILL rank 1 right after the checkpoint of epoch ``--preempt-at``, and resubmit it as the operator
    does: it resumes from that checkpoint. Overhead of one preemption, in wall time over the clean run:
      resume:  t_killed + t_resumed - t_clean
      restart: t_killed  (restarting from scratch repeats the whole clean run after the loss)
    printed with their ratio (below 1: resuming wastes less than restarting).
(2) An elastic 3-worker ``horovod_elastic`` job: training steps per second before rank 1 is killed and
    after the job re-formed with 2 workers (timed by when the trainer's metrics lines reach the log).

    AIRFLOW_HOME=/tmp/bench-home .venv/bin/python benchmarks/preemption_cost.py [--epochs 12] [--preempt-at 6]

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
from integration.elastic.elastic_support import rank_process  # noqa: E402

from airflow_ml_provider.jobs.backends.local import LocalBackend  # noqa: E402
from airflow_ml_provider.jobs.preemption import last_checkpoint, resubmission  # noqa: E402
from airflow_ml_provider.jobs.spec import TrainingJobSpec  # noqa: E402
from airflow_ml_provider.jobs.state import JobState  # noqa: E402

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
    rank_process(run.backend.job_dir(run.name), 1, trainer).send_signal(signal.SIGKILL)


def preemption_overhead(backend: LocalBackend, work: Path, epochs: int, preempt_at: int) -> None:
    trainer = "airflow_ml_provider.runtime.horovod_keras"

    def spec(tag: str) -> TrainingJobSpec:
        return TrainingJobSpec(framework="horovod", num_workers=2, env=ENV, checkpoint_dir=str(work / tag),
                               command=["python", "-m", trainer, "--epochs", str(epochs)])

    clean = Run(backend, "clean", spec("clean")).finish()
    preempted = Run(backend, "preempted", spec("preempted"))
    preempted.until(lambda r: r.last("checkpoint", "epoch") >= preempt_at)
    kill_rank_1(preempted, trainer)
    killed = preempted.finish()
    status = backend.status("preempted")
    assert status.state is JobState.PREEMPTED, status
    resume = last_checkpoint(backend.log_source("preempted"))
    again, labels = resubmission(spec("preempted"), {}, 1, resume)
    resumed = Run(backend, "preempted", again, labels).finish()
    resume_cost, restart_cost = killed + resumed - clean, killed
    print(f"fixed-size, {epochs} epochs, 2 ranks, preempted after {resume.describe()}:")
    print(f"  clean run {clean:.1f} s; preempted attempt {killed:.1f} s; resumed attempt {resumed:.1f} s")
    print(f"  overhead of one preemption: resume {resume_cost:.1f} s vs restart from scratch {restart_cost:.1f} s"
          f" -> ratio {resume_cost / restart_cost:.2f}")


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
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--preempt-at", type=int, default=6)
    parser.add_argument("--elastic-steps", type=int, default=600)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="preemption-cost-"))
    server = None if os.environ.get("AIRFLOW_ML_ETCD") else start_etcd()
    try:
        backend = LocalBackend(work / "ml", image=str(TRAIN_ENV),
                               etcd=os.environ.get("AIRFLOW_ML_ETCD") or server.endpoint)
        preemption_overhead(backend, work, args.epochs, args.preempt_at)
        elastic_throughput(backend, work, args.elastic_steps)
    finally:
        if server:
            server.stop()


if __name__ == "__main__":
    main()
