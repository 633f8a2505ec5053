"""The local backend's launcher: runs one job's workers, merges their output by rank, records the end.

Started by ``LocalBackend.submit`` as ``python -m airflow_ml_provider.jobs.backends.local_launcher
JOB_DIR`` in a session of its own. Commands are argv lists, never a shell string.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from airflow_ml_provider.jobs.spec import Framework, TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState, JobStatus

_HOROVOD_LINE = re.compile(r"^\[(?P<rank>\d+)\]<(?:stdout|stderr)>:(?P<text>.*)$")
# Variables of the Airflow process that must not leak into user code (connections, DB URLs, secrets).
_PRIVATE_ENV = ("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_", "_AIRFLOW")
_ELASTIC_GLOO_TIMEOUT_S = 120  # seconds; also how long a survivor may wait on a dead peer
_KILL_SIGNALS = {-signal.SIGKILL, -signal.SIGTERM, 128 + signal.SIGKILL, 128 + signal.SIGTERM}


def launch_plan(spec: TrainingJobSpec, image: str, job_dir: Path, etcd: str | None = None) -> dict:
    """What the launcher will run: the argv, the variables it adds to the workers' environment, cwd.

    An elastic Horovod job discovers its worker slots in ``etcd`` (see local_discovery).
    """
    bin_dir = str(Path(image) / "bin")
    env = {
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", os.defpath),
        "VIRTUAL_ENV": image,
        "PYTHONUNBUFFERED": "1",  # lines reach the task log as they are printed
        "OMP_WAIT_POLICY": "PASSIVE",  # spinning OpenMP threads starve the other workers on shared cores
        "AIRFLOW_ML_NUM_WORKERS": str(spec.num_workers),
        **({"AIRFLOW_ML_MODEL_DIR": spec.model_dir} if spec.model_dir else {}),
        **({"AIRFLOW_ML_CHECKPOINT_DIR": spec.checkpoint_dir} if spec.checkpoint_dir else {}),
        **spec.env,
    }
    if spec.framework is Framework.HOROVOD:
        n = str(spec.num_workers)
        hosts = _elastic_args(spec, job_dir, etcd) if spec.elastic else ["-H", f"localhost:{n}"]
        argv = [
            os.path.join(bin_dir, "horovodrun"), "-np", n, *hosts, "--gloo",
            "--network-interface", "lo",
            # records each rank's exit code, then execs nothing: the user's argv runs unchanged
            sys.executable, "-m", "airflow_ml_provider.jobs.backends.local_rank", str(job_dir / "exit"), "--",
            *spec.command,
        ]
    else:
        argv = list(spec.command)
    return {"framework": spec.framework.value, "argv": argv, "env": env,
            "cwd": spec.working_dir or str(job_dir)}


def _elastic_args(spec: TrainingJobSpec, job_dir: Path, etcd: str | None) -> list[str]:
    """horovodrun's elastic options: size bounds, and the discovery command reading the slots in etcd.
    (No ``--log-level``: horovodrun hands it to the workers too, whose C++ log lines then tear the
    trainer's JSON lines apart; the trainer reports each membership change itself.) The Gloo timeout
    is raised because a re-forming ring waits for a joining worker to import TensorFlow, which takes
    longer than the default 30 s on a loaded machine."""
    if not etcd:
        raise ValueError("an elastic job needs etcd for its worker slots: set AIRFLOW_ML_ETCD or the backend's etcd")
    discovery = [sys.executable, "-m", "airflow_ml_provider.jobs.local_discovery", "--etcd", etcd,
                 "--job", job_dir.name]
    return ["--min-np", str(spec.min_workers or spec.num_workers), "--max-np", str(spec.max_workers or spec.num_workers),
            "--host-discovery-script", shlex.join(discovery), "--gloo-timeout-seconds", str(_ELASTIC_GLOO_TIMEOUT_S)]


def main(job_dir: Path) -> int:
    record = json.loads((job_dir / "job.json").read_text())
    spec = TrainingJobSpec(**record["spec"])
    plan = launch_plan(spec, record["image"], job_dir, record.get("etcd"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(_PRIVATE_ENV)} | plan["env"]
    (job_dir / "exit").mkdir(exist_ok=True)
    for directory in (spec.model_dir, spec.checkpoint_dir):
        if directory:
            Path(directory).mkdir(parents=True, exist_ok=True)
    with (job_dir / "output.log").open("a", buffering=1, encoding="utf-8") as log:
        writer = _LineWriter(log)
        runner = _run_horovod if spec.framework is Framework.HOROVOD else _run_ranks
        try:
            status = runner(spec, plan, env, writer, job_dir)
        except OSError as exc:  # the program does not exist or cannot be executed
            writer.write("launcher", f"could not start {plan['argv'][0]!r}: {exc}")
            status = JobStatus(JobState.FAILED, f"could not start {plan['argv'][0]!r}: {exc}")
        writer.write("launcher", f"job ended: {status.state.value} {status.message}".rstrip())
    tmp = job_dir / "status.json.tmp"
    tmp.write_text(json.dumps(status.to_dict()))
    os.replace(tmp, job_dir / "status.json")
    return 0


class _LineWriter:
    """Serializes lines from many reader threads into one file, ``[source] text`` each."""

    def __init__(self, log: IO[str]):
        self._log = log
        self._lock = threading.Lock()

    def write(self, source: str, text: str) -> None:
        with self._lock:
            self._log.write(f"[{source}] {text}\n")


def _run_horovod(spec, plan, env, writer: _LineWriter, job_dir: Path) -> JobStatus:
    proc = subprocess.Popen(plan["argv"], env=env, cwd=plan["cwd"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    _forward_sigterm([proc])
    for line in proc.stdout:
        line = line.rstrip("\n")
        match = _HOROVOD_LINE.match(line)
        if match:
            writer.write(f"rank {match['rank']}", match["text"])
        else:
            writer.write("launcher", line)
    code = proc.wait()
    exits = _recorded_exits(job_dir / "exit")
    failures = [(rank, c) for rank, c in exits if c != 0]
    if spec.elastic and code == 0:  # horovodrun finished the job with the workers it had left
        lost = ", ".join(f"rank {rank} (exit {c})" for rank, c in failures)
        return JobStatus(JobState.SUCCEEDED, f"elastic: lost {lost}; finished without them" if lost else "",
                         dict(exits))
    return _verdict(dict(exits), failures, code)


def _run_ranks(spec: TrainingJobSpec, plan, env, writer: _LineWriter, job_dir: Path) -> JobStatus:
    """One process per rank; each is told every rank's address (LightGBM's ``machines``)."""
    ports = _free_ports(spec.num_workers)
    machines = ",".join(f"127.0.0.1:{port}" for port in ports)
    procs = []
    for rank, port in enumerate(ports):
        rank_env = env | {"AIRFLOW_ML_RANK": str(rank), "AIRFLOW_ML_LOCAL_PORT": str(port),
                          "AIRFLOW_ML_MACHINES": machines}
        procs.append(subprocess.Popen(plan["argv"], env=rank_env, cwd=plan["cwd"], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      errors="replace"))
    _forward_sigterm(procs)
    readers = [threading.Thread(target=_pump, args=(p.stdout, f"rank {r}", writer)) for r, p in enumerate(procs)]
    for reader in readers:
        reader.start()
    codes: dict[int, int] = {}
    failures: list[tuple[int, int]] = []
    while len(codes) < len(procs):
        for rank, proc in enumerate(procs):
            if rank not in codes and (code := proc.poll()) is not None:
                codes[rank] = code
                if code != 0:
                    failures.append((rank, code))
        if failures:  # the others would wait forever on the missing peer
            for rank, proc in enumerate(procs):
                if rank not in codes and proc.poll() is None:
                    proc.terminate()
        time.sleep(0.1)
    for reader in readers:
        reader.join()
    return _verdict(codes, failures, max(codes.values(), key=abs))


def _verdict(codes: dict[int, int], failures: list[tuple[int, int]], overall: int) -> JobStatus:
    if overall == 0 and not failures:
        return JobStatus(JobState.SUCCEEDED, exit_codes=codes)
    if not failures:
        return JobStatus(JobState.FAILED, f"launcher exited with {overall}", exit_codes=codes)
    rank, code = failures[0]
    if code in _KILL_SIGNALS:
        return JobStatus(JobState.PREEMPTED, f"rank {rank} was killed by a signal (exit {code})", codes)
    return JobStatus(JobState.FAILED, f"rank {rank} exited with code {code}", codes)


def _recorded_exits(exit_dir: Path) -> list[tuple[int, int]]:
    """(rank, exit code) of every rank the wrapper saw end, in the order they ended."""
    paths = sorted(exit_dir.glob("rank-*"), key=lambda path: path.stat().st_mtime_ns)
    return [(int(path.name.removeprefix("rank-")), int(path.read_text())) for path in paths]


def _pump(stream: IO[str], source: str, writer: _LineWriter) -> None:
    for line in stream:
        writer.write(source, line.rstrip("\n"))


def _forward_sigterm(procs: list[subprocess.Popen]) -> None:
    def handler(signum, _frame):
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    signal.signal(signal.SIGTERM, handler)


def _free_ports(count: int) -> list[int]:
    """Ports the OS reports free right now; all held open together so no two ranks get the same one."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
