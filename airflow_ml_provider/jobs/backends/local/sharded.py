"""The launcher's runner of a sharded job (``jobs.shards``): M workers, the launcher's queue of N shards.

Each worker gets a socket of its own as its stdin: the launcher writes it the next shard there and reads back
how the shard ended (``runtime.shards``), so a worker can take and report only the shards the launcher handed
it, and nothing it prints is taken for a report. A worker stays until every shard is settled (a shard that
failed, or whose worker was lost, may come back to it), then its channel closes and it exits.

- a shard that fails (its program exits non-zero, its function raises) waits again, up to ``max_attempts``
  tries; then it counts as failed, and more than ``max_failed_shards`` failed shards fail the job, naming
  the shard and the last lines its worker printed for it;
- a worker killed from outside (a signal) gives its shard back without spending a try, and the job goes on
  with the others; when none is left, the job is PREEMPTED: resubmitted, it skips the committed shards;
- a worker that exits otherwise gives its shard back as a failed try.

Progress: every ``PROGRESS_S`` seconds and at the end, a ``[launcher]`` line (``shards 4,210/10,000  rows
8.1M ...``) and a ``metrics`` line; the end's ``result`` line (``ShardQueue.result``) is the task's XCom.
"""

from __future__ import annotations

import json
import queue
import signal
import socket
import threading
import time
from collections import deque
from typing import IO

from airflow_ml_provider.jobs.backends.local.common import JOB_UID_ENV
from airflow_ml_provider.jobs.backends.local.output import lines
from airflow_ml_provider.jobs.shards import ROOT_ENV, STREAM_ENV, ShardQueue, progress
from airflow_ml_provider.jobs.state import JobState, JobStatus

PROGRESS_S = 5.0
TAIL_LINES = 20  # of a worker's output kept for the shard it runs: a failure names them
_KILLED = {-signal.SIGKILL, -signal.SIGTERM, 128 + signal.SIGKILL, 128 + signal.SIGTERM}
_POLL_S = 0.05
_REPORT_CHARS = 8192


class _Worker:
    def __init__(self, rank: int, channel: socket.socket):
        self.rank, self.channel = rank, channel
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.code: int | None = None
        self.closed = False
        self.reader: threading.Thread | None = None

    def send(self, message: dict) -> None:
        try:
            self.channel.sendall((json.dumps(message) + "\n").encode())
        except OSError:  # it is gone: its end is noticed by its exit
            pass

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.channel.shutdown(socket.SHUT_WR)  # its EOF: no more shards
            except OSError:
                pass


def run_shards(spec: dict, plan: dict, env: dict[str, str], writer, start, on_started) -> JobStatus:
    """Run ``spec``'s shards on ``min(num_workers, count)`` workers started by ``start``; the job's status.
    ``on_started(uid)`` is called once they run (the launcher's: a SIGTERM passed on to them)."""
    config = spec["shards"]
    shards = ShardQueue(config["count"], config.get("max_attempts", 3), config.get("max_failed_shards", 0))
    inputs = config.get("inputs") or []
    pairs = [socket.socketpair() for _ in range(min(spec["num_workers"], shards.count))]
    base = env | {ROOT_ENV: config["output"], STREAM_ENV: "1"}
    try:
        procs = start([(plan["argv"], base | {"AIRFLOW_ML_RANK": str(rank)}, plan["cwd"])
                       for rank in range(len(pairs))], stdins=[theirs.fileno() for _, theirs in pairs])
    except OSError as exc:
        message = f"could not start {plan['argv'][0]!r}: {exc.strerror or exc}"
        writer.write("launcher", message)
        return JobStatus(JobState.FAILED, message)
    finally:
        for _, theirs in pairs:
            theirs.close()
    on_started(env[JOB_UID_ENV])
    workers = [_Worker(rank, ours) for rank, (ours, _) in enumerate(pairs)]
    events: queue.Queue = queue.Queue()
    pumps = [threading.Thread(target=_pump, args=(p.stdout, w, writer), daemon=True) for p, w in zip(procs, workers)]
    for worker in workers:
        worker.reader = threading.Thread(target=_read_reports, args=(worker, events), daemon=True)
    for thread in [*pumps, *(w.reader for w in workers)]:
        thread.start()
    started = time.monotonic()

    def hand_out(worker: _Worker) -> None:
        if worker.code is not None or worker.closed or worker.rank in shards.running:
            return
        if (task := shards.take(worker.rank)) is not None:
            index, attempt = task
            worker.tail.clear()
            worker.send({"index": index, "attempt": attempt, "inputs": inputs[index] if inputs else []})

    try:
        stop = _follow(shards, workers, procs, events, hand_out, config, writer)
    finally:  # (whatever ended the loop) no worker waits for a shard any more
        for worker in workers:
            worker.close()
    if stop is not None:
        for worker, proc in zip(workers, procs):
            if worker.code is None and proc.poll() is None:
                proc.terminate()
    codes = {w.rank: proc.wait() for w, proc in zip(workers, procs)}
    for pump in pumps:
        pump.join()
    _progress(shards, time.monotonic() - started, writer)
    writer.write("launcher", json.dumps({"event": "result", **shards.result()}, sort_keys=True))
    if stop is not None:
        return JobStatus(stop.state, stop.message, codes)
    if shards.failed:
        return JobStatus(JobState.SUCCEEDED, f"{len(shards.failed)} shard(s) failed, within max_failed_shards "
                                             f"({shards.max_failed_shards}): {sorted(shards.failed)[:50]}", codes)
    return JobStatus(JobState.SUCCEEDED, exit_codes=codes)


def _follow(shards: ShardQueue, workers: list[_Worker], procs: list, events: queue.Queue, hand_out, config: dict,
            writer) -> JobStatus | None:
    """Hand out shards and take reports until every shard is settled (None) or the job must stop (its status)."""
    started = last = time.monotonic()
    for worker in workers:
        hand_out(worker)
    stop: JobStatus | None = None
    while True:
        try:
            rank, message = events.get(timeout=_POLL_S)
            worker = workers[rank]
            why = shards.report(rank, message.get("index"), message.get("state"), message.get("rows", 0),
                                str(message.get("error", "")))
            if why is not None:
                writer.write("launcher", f"ignored: {why}")
            elif message.get("state") == "failed":
                _note_failure(shards, message["index"], worker, writer)
            hand_out(worker)
        except queue.Empty:
            pass
        for worker, proc in zip(workers, procs):
            if worker.code is None and (code := proc.poll()) is not None:
                worker.reader.join(timeout=5)  # its last reports first
                _drain(events, shards, workers, writer)
                worker.code = code
                killed = code in _KILLED
                if (index := shards.lost(worker.rank, f"its worker (rank {worker.rank}) exited with code {code}",
                                         counts=not killed)) is not None:
                    writer.write("launcher", f"rank {worker.rank} ended (exit {code}) while running shard {index}: "
                                             f"it waits again{'' if killed else ' (a failed try)'}")
                    if not killed:
                        _note_failure(shards, index, worker, writer)
                else:
                    writer.write("launcher", f"rank {worker.rank} ended (exit {code}) between shards")
                for other in workers:
                    if other.rank not in shards.running:
                        hand_out(other)
        if shards.too_many_failed and stop is None:
            stop = _failure(shards, config)
        if shards.finished or stop is not None:
            break
        alive = [w for w in workers if w.code is None]
        if not alive:
            killed = [w for w in workers if w.code in _KILLED]
            left = shards.count - shards.settled
            who = ", ".join(f"rank {w.rank} (exit {w.code})" for w in workers)
            state = JobState.PREEMPTED if killed else JobState.FAILED
            stop = JobStatus(state, f"every worker ended ({who}) with {left:,} shard(s) not done: a resubmitted job "
                                    "runs only those", {w.rank: w.code for w in workers})
            break
        if time.monotonic() - last >= PROGRESS_S:
            last = time.monotonic()
            _progress(shards, last - started, writer)
    return stop


def _drain(events: queue.Queue, shards: ShardQueue, workers: list[_Worker], writer) -> None:
    """Take the reports already read (a worker's last ones, before its end is handled)."""
    while True:
        try:
            rank, message = events.get_nowait()
        except queue.Empty:
            return
        if shards.report(rank, message.get("index"), message.get("state"), message.get("rows", 0),
                         str(message.get("error", ""))) is None and message.get("state") == "failed":
            _note_failure(shards, message["index"], workers[rank], writer)


def _note_failure(shards: ShardQueue, index: int, worker: _Worker, writer) -> None:
    """A failed try: the shard's last lines kept with it (a failure of the job names them)."""
    tail = "\n".join(worker.tail)
    shards.last_failure[index] = f"{shards.last_failure.get(index, 'failed')}" + (f"; its last lines:\n{tail}"
                                                                                  if tail else "")
    final = index in shards.failed
    writer.write("launcher", f"shard {index} failed (try {shards.attempts[index]} of {shards.max_attempts})"
                             f"{': no more tries' if final else ''}")


def _failure(shards: ShardQueue, config: dict) -> JobStatus:
    index = shards.failed[-1]
    return JobStatus(JobState.FAILED, f"shard {index} failed {shards.attempts[index]} time(s) (max_attempts "
                                      f"{shards.max_attempts}); {len(shards.failed)} failed shard(s), more than "
                                      f"max_failed_shards ({config.get('max_failed_shards', 0)}): "
                                      f"{shards.last_failure.get(index, '')}")


def _progress(shards: ShardQueue, elapsed: float, writer) -> None:
    writer.write("launcher", progress(shards, elapsed))
    writer.write("launcher", json.dumps({"event": "metrics", "step": shards.settled, "shards_done": shards.settled,
                                         "rows": shards.rows, "rows_per_s": round(shards.rows / elapsed, 3)
                                         if elapsed > 0 else 0.0}, sort_keys=True))


def _pump(stream: IO[bytes], worker: _Worker, writer) -> None:
    source = f"rank {worker.rank}"
    for line in lines(stream):
        worker.tail.append(line)
        writer.write(source, line)


def _read_reports(worker: _Worker, events: queue.Queue) -> None:
    """A worker's reports, one JSON object a line (bounded; anything else ignored); ends at its EOF."""
    buffered = b""
    while True:
        try:
            chunk = worker.channel.recv(65536)
        except OSError:
            return
        if not chunk:
            return
        buffered += chunk
        *whole, buffered = buffered.split(b"\n")
        buffered = buffered[-_REPORT_CHARS:]
        for line in whole:
            try:
                message = json.loads(line[:_REPORT_CHARS])
            except ValueError:
                continue
            if isinstance(message, dict):
                events.put((worker.rank, message))
