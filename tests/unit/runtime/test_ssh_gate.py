"""The Volcano master's gate (runtime.ssh_gate) as the pod runs it: a real process, real sockets, its exec."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

GATE = [sys.executable, "-m", "airflow_ml_provider.runtime.ssh_gate"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_command_runs_only_once_every_host_listens_and_as_the_gate_process_itself():
    port = _free_port()
    listener = socket.socket()
    opened = {}

    def listen_later():
        time.sleep(1.5)  # the worker's sshd starts after the master: the gate must wait, not fail
        listener.bind(("127.0.0.1", port))
        listener.listen()
        opened["at"] = time.monotonic()

    threading.Thread(target=listen_later, daemon=True).start()
    started = time.monotonic()
    probe = "import os, time; print(os.getpid(), time.monotonic())"
    gate = subprocess.Popen([*GATE, "--port", str(port), "--wait-s", "30", "127.0.0.1:2,localhost:2", "--",
                             sys.executable, "-c", probe], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = gate.communicate(timeout=60)
    listener.close()
    assert gate.returncode == 0, err
    pid, ran_at = out.split()
    assert float(ran_at) >= opened["at"] > started, "the command ran before the port listened"
    assert int(pid) == gate.pid, "the command replaced the gate (exec): a signal to the pod reaches it"


def test_a_host_that_never_listens_fails_the_launch_naming_it_and_the_command_never_runs(tmp_path):
    port = _free_port()
    marker = tmp_path / "ran"
    done = subprocess.run([*GATE, "--port", str(port), "--wait-s", "1", "127.0.0.1:1", "--",
                           sys.executable, "-c", f"open({str(marker)!r}, 'w')"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 3 and not marker.exists()
    assert f"sshd on port {port} did not answer in 1 s: 127.0.0.1:" in done.stderr, done.stderr


def test_no_command_is_a_usage_error():
    done = subprocess.run([*GATE, "h1:1", "--"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no command after '--'" in done.stderr
