"""XGBoost's tracker for a job, and the gate each worker passes before its own script starts.

Two modes, both runnable as a file (``python xgboost_tracker.py ...``, the local launcher's way: the gate
needs only the standard library, the tracker only the image's ``xgboost``) or as a module
(``python -m airflow_ml_provider.runtime.xgboost_tracker ...``, the pods' way):

- ``serve --workers N --host H --port P``: ``xgboost.tracker.RabitTracker(n_workers=N, host_ip=H, port=P,
  sortby="task")`` (workers ranked by their ``DMLC_TASK_ID``), until every worker has shut down its
  communicator. The tracker must run from the job's own image: its protocol is the workers' xgboost version's.
- ``worker [--task-id ID] [--serve-workers N] -- ARGV...``: sets ``DMLC_TASK_ID`` (where the backend knows the
  rank only as ``$(JOB_COMPLETION_INDEX)`` or ``$(VC_TASK_INDEX)``, which the kubelet expands in the command),
  starts the tracker beside this worker when ``--serve-workers`` is given and the task id is 0 (a pod's
  worker 0, which the others reach through the job's headless Service), waits until the tracker at
  ``DMLC_TRACKER_URI:DMLC_TRACKER_PORT`` listens, then replaces itself with ``ARGV``: the user's script runs as
  it is, as this very process (a signal to the worker reaches the script). Worker 0 serving the tracker runs
  ``ARGV`` as its child instead, and ends once the tracker has (every worker done), as ``ARGV`` ended.

Why the gate: a worker's ``CommunicatorContext`` retries a refused connection only a few times within
seconds (xgboost 3.2 ``collective/socket.cc``), and the tracker starts with its workers: on a loaded machine,
or when worker 0's pod is placed last, the script failed before the tracker listened. On a local job's loopback
the gate reads the kernel's socket table; in a pod it probes with a connection closed at once, which the tracker
drops with one warning ("Failed to initialize worker proxy") and then serves the real workers.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

WAIT_S = 600.0  # how long a worker waits for the tracker (a pod's worker 0 may be placed minutes later)
TRACKER_PORT = 9091  # on a Kubernetes job's worker 0
TRACKER_GRACE_S = 60.0  # how long a pod's worker 0 waits, its command done, for the other workers to finish


def serve(workers: int, host: str, port: int) -> int:
    """Run the tracker until the job's workers are done."""
    from xgboost.tracker import RabitTracker

    tracker = RabitTracker(n_workers=workers, host_ip=host, port=port, sortby="task")
    tracker.start()
    print(f"xgboost tracker listening on {host}:{port} for {workers} workers", flush=True)
    tracker.wait_for()
    print("xgboost tracker: every worker finished", flush=True)
    return 0


def wait_for_tracker(host: str, port: int, wait_s: float = WAIT_S) -> None:
    """Return once the tracker at ``host:port`` listens; TimeoutError. On this machine's loopback (a local job, in
    its own network namespace) that is read from the kernel's socket table, without a connection; elsewhere (a
    pod) by a connection closed at once (a name not yet in DNS is retried too)."""
    deadline = time.monotonic() + wait_s
    local = host == "localhost" or host.startswith("127.")
    while True:
        try:
            if not local:
                socket.create_connection((host, port), timeout=5).close()
                return
            if _listening(port):
                return
            error: object = "nothing listens there"
        except OSError as exc:
            error = exc
        if time.monotonic() >= deadline:
            raise TimeoutError(f"the xgboost tracker at {host}:{port} did not answer in {wait_s:g} s: {error}")
        time.sleep(0.2)


def _listening(port: int) -> bool:
    """Whether a TCP socket of this network namespace listens on ``port`` (``/proc/net/tcp``: state 0A)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            continue
        if any(len(row) > 3 and row[3] == "0A" and int(row[1].rsplit(":", 1)[1], 16) == port for row in rows):
            return True
    return False


def worker(args: argparse.Namespace) -> int:
    if not args.argv:
        print("xgboost_tracker worker: no command after '--'", file=sys.stderr)
        return 2
    if args.task_id is not None:
        os.environ["DMLC_TASK_ID"] = args.task_id
    host, port = os.environ.get("DMLC_TRACKER_URI"), os.environ.get("DMLC_TRACKER_PORT")
    if not host or not (port or "").isdigit():
        print("xgboost_tracker worker: DMLC_TRACKER_URI and DMLC_TRACKER_PORT must be set", file=sys.stderr)
        return 2
    tracker = None
    if args.serve_workers and os.environ.get("DMLC_TASK_ID") == "0":
        # the tracker beside worker 0, in the pod: bound to every address, so the Service's name reaches it
        tracker = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve", "--workers",
                                    str(args.serve_workers), "--host", "0.0.0.0", "--port", port],
                                   stdin=subprocess.DEVNULL)
    try:
        wait_for_tracker(host, int(port), args.wait_s)
    except TimeoutError as exc:
        print(f"xgboost_tracker worker: {exc}", file=sys.stderr)
        return 3
    if tracker is None:
        os.execvp(args.argv[0], args.argv)  # the worker's command is this process: a signal reaches it
    return _run_beside(tracker, args.argv)


def _run_beside(tracker: subprocess.Popen, argv: list[str]) -> int:
    """Worker 0 of a pod: its command as a child (SIGTERM and SIGINT passed on), then the tracker's end before
    the pod's: worker 0 may finish before the others have told the tracker they are done, and its container's
    end would take the tracker with it, failing their shutdown. Ends as the command did."""
    import signal

    child = subprocess.Popen(argv)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: child.send_signal(number))
    code = child.wait()
    try:
        tracker.wait(timeout=TRACKER_GRACE_S if code == 0 else 5.0)  # failed: the others may never finish
    except subprocess.TimeoutExpired:
        pass
    if tracker.poll() is None:
        tracker.terminate()
    return code if code >= 0 else 128 - code


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="xgboost_tracker")
    modes = parser.add_subparsers(dest="mode", required=True)
    tracker = modes.add_parser("serve", help="run the tracker")
    tracker.add_argument("--workers", type=int, required=True)
    tracker.add_argument("--host", default="127.0.0.1")
    tracker.add_argument("--port", type=int, required=True)
    gate = modes.add_parser("worker", help="wait for the tracker, then run the worker's command")
    gate.add_argument("--task-id")
    gate.add_argument("--serve-workers", type=int)
    gate.add_argument("--wait-s", type=float, default=WAIT_S)
    gate.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.mode == "worker" and args.argv[:1] == ["--"]:
        args.argv = args.argv[1:]
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.mode == "serve":
        return serve(args.workers, args.host, args.port)
    return worker(args)


if __name__ == "__main__":
    sys.exit(main())
