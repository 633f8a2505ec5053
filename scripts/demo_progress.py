"""What `make demo` shows while a DAG runs: each task as it starts and ends with ``[done/total]``, the
training jobs' live metric lines (at most one a second, and the last), and a "still running" line; everything Airflow itself prints (hundreds of lines of task logging) goes
to a log file instead, named up front.

``run_quietly(dag, log_path, say)`` runs ``dag.test()`` with this process's stdout and stderr (the file
descriptors, so subprocesses and C libraries too) pointed at ``log_path``, while a thread reads the run's
task states from the metadata database and the metric lines from that log, and reports them through
``say`` (which writes to the real terminal).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# the follow core's compact metric lines in the task log: "[rank 0] step 25  auc=0.9920  loss=0.0734"
METRIC_LINE = re.compile(r"\[(?P<source>rank \d+)\] (?P<text>step \d+ .*?)\s*\[airflow\.task")
DONE = ("success", "failed", "skipped", "upstream_failed", "removed")
MARK = {"success": "ok", "failed": "FAILED", "skipped": "skipped", "upstream_failed": "not run (upstream failed)"}


@contextlib.contextmanager
def output_to(log_path: Path) -> Iterator[None]:
    """Point file descriptors 1 and 2 at ``log_path`` (appending) for the duration."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with log_path.open("ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def terminal() -> Callable[[str], None]:
    """A ``say`` that writes to the terminal this process started with, whatever fd 1 points at later."""
    stream = os.fdopen(os.dup(1), "w", buffering=1)
    return lambda text: stream.write(text + "\n")


class Progress(threading.Thread):
    """Reports one DAG's newest run: task starts and ends, metric lines, ``[done/total]`` counts."""

    def __init__(self, dag_id: str, log_path: Path, say: Callable[[str], None], since: float):
        super().__init__(daemon=True, name=f"progress of {dag_id}")
        self.dag_id, self.log_path, self.say, self.since = dag_id, log_path, say, since
        self.offset = log_path.stat().st_size if log_path.exists() else 0
        self.states: dict[tuple[str, int], str] = {}
        self.labels: dict[tuple[str, int], str | None] = {}
        self.started: dict[tuple[str, int], float] = {}
        self.stopping = threading.Event()
        self.last_said = time.monotonic()
        self.quiet_s = 15.0  # a "still running" line after this long without news
        self.metric_every_s = 1.0  # at most one metric line a second (and always the last one)
        self.metric_shown_at = 0.0
        self.metric_pending: str | None = None

    def run(self) -> None:
        while not self.stopping.wait(0.5):
            self.poll()
        self.poll()
        self._flush_metric()

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=10)

    def poll(self) -> None:
        self._metric_lines()
        with contextlib.suppress(Exception):  # SQLite busy while the run writes: next round
            self._tasks()
        now = time.monotonic()
        running = [f"{self._task_name(key)} for {now - self.started.get(key, now):.0f} s"
                   for key, state in sorted(self.states.items()) if state == "running"]
        if running and now - self.last_said >= self.quiet_s:
            self._say(f"  ... running: {', '.join(running)}")

    def _say(self, text: str) -> None:
        self.last_said = time.monotonic()
        self.say(text)

    def _task_name(self, key: tuple[str, int]) -> str:
        task_id, index = key
        return task_id + (f" [{self.labels.get(key) or index}]" if index >= 0 else "")

    def _tasks(self) -> None:
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session

        with create_session() as session:
            run = session.query(DagRun).filter_by(dag_id=self.dag_id).order_by(DagRun.id.desc()).first()
            if run is None or run.start_date is None or run.start_date.timestamp() < self.since - 5:
                return
            never = run.start_date.replace(year=9999)  # not started: after every started task
            tis = [(ti.task_id, ti.map_index, str(ti.state or ""), ti.rendered_map_index)
                   for ti in sorted(run.get_task_instances(session=session),
                                    key=lambda ti: (ti.end_date or never, ti.start_date or never, ti.task_id))]
        for task_id, index, state, label in tis:  # in the order they ended, then started
            key, before = (task_id, index), self.states.get((task_id, index))
            if state == before:
                continue
            self.states[key], self.labels[key] = state, label
            name = self._task_name(key)
            if state == "running" and before != "running":
                self.started[key] = time.monotonic()
                self._say(f"  > {name}")
            elif state in DONE and state in MARK:
                self._metric_lines()  # the task's last lines before its end
                self._flush_metric()
                took = time.monotonic() - self.started.get(key, time.monotonic())
                timing = f" in {took:.0f} s" if key in self.started else ""
                done = sum(known in DONE for known in self.states.values())
                self._say(f"  [{done}/{len(tis)}] {name}: {MARK[state]}{timing}")
            elif state == "awaiting_input":
                self._say(f"  ? {name}: waiting for a person's answer (Required Actions page)")

    def _metric_lines(self) -> None:
        if not self.log_path.exists():
            return
        with self.log_path.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        complete = chunk.rfind(b"\n") + 1
        self.offset += complete
        for line in chunk[:complete].decode(errors="replace").splitlines():
            if match := METRIC_LINE.search(line):
                self.metric_pending = f"      {match['source']}: {match['text']}"
                if time.monotonic() - self.metric_shown_at >= self.metric_every_s:
                    self._flush_metric()

    def _flush_metric(self) -> None:
        if self.metric_pending is not None:
            self.metric_shown_at = time.monotonic()
            self._say(self.metric_pending)
            self.metric_pending = None


def run_quietly(dag: Any, log_path: Path, say: Callable[[str], None], **test_kwargs: Any):
    """``dag.test(**test_kwargs)`` with Airflow's output in ``log_path`` and progress through ``say``."""
    from airflow.models import import_all_models
    from sqlalchemy.orm import configure_mappers

    import_all_models()  # here, not in the thread: concurrent first imports of the models deadlock
    configure_mappers()
    progress = Progress(dag.dag_id, log_path, say, time.time())
    progress.start()
    try:
        with output_to(log_path):
            return dag.test(**test_kwargs)
    finally:
        progress.stop()
