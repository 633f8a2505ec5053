"""`make ui` (scripts/ui.py): Airflow standalone with the project's DAGs comes up from the control
environment (its bin first on PATH: standalone starts `airflow` by name), says where to log in with
credentials that work, and leaves no process behind when stopped."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from airflow_ml_provider.jobs.backends.local.ports import free_ports
from support import REPO

pytestmark = pytest.mark.integration


# What `make demo`'s dag.test() runs leave behind: every DAG of the folder registered, paused by Airflow's default
# [core] dags_are_paused_at_creation (dag.test() syncs the DAG's whole bundle, sibling DAGs included).
REGISTER_AS_DAG_TEST_DOES = """
from airflow.dag_processing.bundles.manager import DagBundlesManager
from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
manager = DagBundlesManager()
manager.sync_bundles_to_db()
for bundle in manager.get_all_dag_bundles():
    bundle.initialize()
    sync_bag_to_db(BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name),
                   bundle.name, bundle.version)
"""


def _registered_paused_as_the_demo_leaves_them(home, env) -> None:
    demo = {**env, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True"}
    for argv in ([sys.executable, "-m", "airflow", "db", "migrate"], [sys.executable, "-c", REGISTER_AS_DAG_TEST_DOES]):
        subprocess.run(argv, env=demo, check=True, capture_output=True, timeout=600)


@pytest.mark.timeout(1200)  # the demo's registration first (a migrated database, every DAG parsed): 2-3 min more
def test_make_ui_starts_airflow_says_where_to_log_in_and_stops_cleanly(tmp_path):
    port, worker_log_port, trigger_log_port = free_ports(3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__") and k != "AIRFLOW_HOME"}
    _registered_paused_as_the_demo_leaves_them(tmp_path, env)  # issue 45 D1: after `make demo`
    env["PATH"] = "/usr/bin:/bin"  # nothing of the venv on PATH: the script must put it there
    env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] = str(worker_log_port)  # other deployments may hold 8793/8794
    env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"] = str(trigger_log_port)
    process = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "scripts" / "ui.py"),
            "--home",
            str(tmp_path),
            "--port",
            str(port),
            "--only",
            "airflow",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        lines = []
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline and not any("Ctrl-C stops everything" in line for line in lines):
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                break
            lines.append(line)
        banner = next((line for line in lines if "Airflow UI" in line), None)
        assert banner, "".join(lines) + (tmp_path / "airflow.log").read_text(errors="replace")[-3000:]
        url, user, password = re.search(r"(http://\S+)\s+log in as (\w+) / (\S+)", banner).groups()
        assert url == f"http://127.0.0.1:{port}"
        request = urllib.request.Request(
            f"{url}/auth/token",
            data=json.dumps({"username": user, "password": password}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            token = json.loads(response.read())["access_token"]
        request = urllib.request.Request(
            f"{url}/api/v2/dags/ml_training_pipeline", headers={"Authorization": f"Bearer {token}"}
        )
        deadline = time.monotonic() + 180
        while True:  # the project's DAGs, parsed by standalone's dag-processor
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    assert json.loads(response.read())["dag_id"] == "ml_training_pipeline"
                    break
            except urllib.error.HTTPError as exc:
                if exc.code != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(2)
        # Issue 45 D1: the Asset-scheduled DAG the demo registered paused runs (a new champion gets scored)
        request = urllib.request.Request(f"{url}/api/v2/dags/ml_batch_scoring", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=60) as response:
            assert json.loads(response.read())["is_paused"] is False
        request = urllib.request.Request(f"{url}/api/v2/dags/ml_quickstart", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=60) as response:
            assert json.loads(response.read())["is_paused"] is True, "only Asset-scheduled DAGs are unpaused"
        assert any("Unpaused ml_batch_scoring" in line for line in lines), lines
        # Issue 25 D12: nothing of `make ui` listens beyond loopback, and it says so
        listening = _listening(_descendants(process.pid))  # (setproctitle blanks some processes' environ)
        assert port in {p for _, p in listening} and all(address in LOOPBACK for address, _ in listening), listening
        assert any(f"Listening on 127.0.0.1 only (Airflow :{port})" in line for line in lines), lines
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    deadline = time.monotonic() + 60  # what was killed last may take a moment to go
    while (
        left := {pid: _describe(pid) for pid in _processes_with_home(tmp_path)}
    ) and time.monotonic() < deadline:
        time.sleep(1)
    assert left == {}, "processes of `make ui` left running"


def _describe(pid: int) -> str:
    try:
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        return f"pgid {os.getpgid(pid)} sid {os.getsid(pid)}: {cmdline[:200]}"
    except OSError:
        return "gone"


def _processes_with_home(home) -> list[int]:
    """Processes whose environment has AIRFLOW_HOME=home (standalone and everything it started)."""
    found, marker = [], f"AIRFLOW_HOME={home}".encode()
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


LOOPBACK = {"127.0.0.1", "::1"}


def _descendants(root: int) -> list[int]:
    """``root`` and every process below it (by parent pid)."""
    parents = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def _listening(pids: list[int]) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state that one of ``pids`` holds (/proc/net/tcp{,6})."""
    import ipaddress

    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = set()
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        for row in open(table).read().splitlines()[1:]:
            fields = row.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, width, 4))  # per 32-bit word, host order
            found.add((str(ipaddress.ip_address(raw)), int(port, 16)))
    return found
