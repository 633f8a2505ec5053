"""The gate every XGBoost worker passes (runtime/xgboost_tracker.py, run as the local launcher runs it: a file,
isolated mode, the standard library only): it waits for the tracker's port, then becomes the worker's command
with DMLC_TASK_ID set; it gives up, saying so, when no tracker answers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from airflow_ml_provider.jobs import xgboost

PRINT_ENV = [sys.executable, "-c", "import os; print(os.getpid(), os.environ['DMLC_TASK_ID'], flush=True)"]


def _gate(port: int, *args: str, wait_s: str = "20", host: str = "127.0.0.1") -> subprocess.Popen:
    env = {**os.environ, "DMLC_TRACKER_URI": host, "DMLC_TRACKER_PORT": str(port)}
    argv = xgboost.local_gate(sys.executable, PRINT_ENV)
    argv[argv.index("worker") + 1:argv.index("worker") + 1] = ["--wait-s", wait_s, *args]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("host", ["127.0.0.1", socket.gethostname()], ids=["loopback", "by-name"])
def test_the_gate_waits_for_the_tracker_then_becomes_the_workers_command(host):
    """On the loopback (a local job) the gate reads the socket table; by name (a pod) it connects."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gate = _gate(port, "--task-id", "1", host=host)
    time.sleep(1.0)
    assert gate.poll() is None, gate.communicate()  # nothing listens yet: it waits
    listener = socket.create_server(("0.0.0.0", port))
    accepted = threading.Thread(target=lambda: listener.accept()[0].close(), daemon=True)
    accepted.start()
    out, err = gate.communicate(timeout=30)
    listener.close()
    assert gate.returncode == 0, err
    pid, task_id = out.split()
    assert (int(pid), task_id) == (gate.pid, "1")  # exec: the command is the gate's own process


def test_the_gate_gives_up_naming_the_tracker_when_nothing_listens():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gate = _gate(port, "--task-id", "0", wait_s="1")
    out, err = gate.communicate(timeout=30)
    assert gate.returncode == 3 and out == ""
    assert f"the xgboost tracker at 127.0.0.1:{port} did not answer in 1 s" in err


JOIN = ("import os\nfrom xgboost import collective\n"
        "with collective.CommunicatorContext(dmlc_tracker_uri=os.environ['DMLC_TRACKER_URI'],\n"
        "        dmlc_tracker_port=int(os.environ['DMLC_TRACKER_PORT']), dmlc_task_id=os.environ['DMLC_TASK_ID']):\n"
        "    print('joined', collective.get_rank(), collective.get_world_size(), flush=True)\n"
        "raise SystemExit(int(os.environ.get('EXIT_WITH', '0')))\n")


@pytest.mark.parametrize("exit_with", [0, 5])
def test_worker_0_serves_the_tracker_runs_its_command_and_ends_as_it_did_after_the_tracker(exit_with):
    """A pod's worker 0 (``--serve-workers``): the tracker beside it, its command as a child; the gate ends after
    the tracker (every worker done), with the command's exit code."""
    pytest.importorskip("xgboost")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "DMLC_TRACKER_URI": "127.0.0.1", "DMLC_TRACKER_PORT": str(port), "EXIT_WITH": str(exit_with)}
    argv = [sys.executable, xgboost.TRACKER_FILE, "worker", "--task-id", "0", "--serve-workers", "1", "--",
            sys.executable, "-c", JOIN]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == exit_with, done.stderr[-3000:]
    out = done.stdout.splitlines()
    assert out[0] == f"xgboost tracker listening on 0.0.0.0:{port} for 1 workers" and "joined 0 1" in out
    if exit_with == 0:
        assert out[-1] == "xgboost tracker: every worker finished", out  # the gate waited for it
