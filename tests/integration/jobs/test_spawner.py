"""The sandbox's spawner (jobs/backends/local/spawner.py) as a real process: once the launcher closes its
control pipe the job is over, so a worker still running is killed and the spawner ends. Before, a worker that
outlived its job's runner (it waited on its shard channel) kept the spawner, the sandbox and the launcher
(which waits for the sandbox's end, its watchdog already stopped) alive for good."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys

import psutil
import pytest

from airflow_ml_provider.jobs.backends.local import sandboxed

pytestmark = pytest.mark.integration


def test_closing_the_control_pipe_kills_the_workers_still_running_and_ends_the_spawner(tmp_path):
    read_end, write_end = os.pipe()
    plan = {"workers": [{"argv": [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"],
                         "env": {}, "cwd": str(tmp_path), "fd": write_end}]}
    spawner = subprocess.Popen([sys.executable, "-I", "-S", sandboxed.SPAWNER], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, pass_fds=(write_end,))
    os.close(write_end)
    try:
        spawner.stdin.write(marshal.dumps(plan))
        spawner.stdin.flush()
        assert json.loads(spawner.stdout.readline()) == {"started": 1}
        with os.fdopen(read_end, "rb") as output:
            assert output.readline() == b"up\n"
            [worker] = psutil.Process(spawner.pid).children()
            spawner.stdin.close()  # the launcher is done with the job
            assert json.loads(spawner.stdout.readline()) == {"worker": 0, "code": -9}
            assert spawner.wait(timeout=30) == 0
            assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
    finally:
        if spawner.poll() is None:
            spawner.kill()
