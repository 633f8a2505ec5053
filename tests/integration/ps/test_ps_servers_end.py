"""A parameter server of the bundled trainer (a real TensorFlow server process of the training environment) ends by
itself, exit 0, once the chief it serves stops listening: on a cluster its pod does not outlive the job (an
Indexed Job per role has no controller that stops it). A socket stands for the chief's port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time

import pytest

from airflow_ml_provider.jobs.backends.local.ports import free_ports
from airflow_ml_provider.jobs.roles import PS_TRAINER
from support import TRAINING_IMAGE, needs_training_env

pytestmark = [pytest.mark.integration, needs_training_env]


def test_a_parameter_server_ends_once_the_chief_stops_listening():
    chief = socket.socket()
    chief.bind(("127.0.0.1", 0))
    chief.listen()
    ps_port, worker_port = free_ports(2)
    cluster = {"chief": [f"127.0.0.1:{chief.getsockname()[1]}"], "ps": [f"127.0.0.1:{ps_port}"],
               "worker": [f"127.0.0.1:{worker_port}"]}
    env = {**os.environ, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "ps", "index": 0}}),
           "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen([str(TRAINING_IMAGE / "bin" / "python"), "-m", PS_TRAINER], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = server.stdout.readline()
        assert first == f"ps 0 serving at 127.0.0.1:{ps_port}\n", first
        time.sleep(12)  # (two of its checks of the chief, which listens)
        assert server.poll() is None, server.stdout.read()
        chief.close()
        assert server.wait(timeout=180) == 0
        assert "ps 0: the chief is gone; stopping" in server.stdout.read()
    finally:
        server.kill()
        chief.close()
