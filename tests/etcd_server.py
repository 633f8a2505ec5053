"""A real etcd (Debian's etcd-server) on loopback ports for the elastic tests and the benchmark."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from airflow_ml_provider.jobs.backends.local.ports import free_ports


@dataclass
class EtcdServer:
    endpoint: str
    process: subprocess.Popen
    data_dir: Path

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        shutil.rmtree(self.data_dir, ignore_errors=True)


def etcd_binary() -> str | None:
    return shutil.which("etcd")


def start_etcd(timeout_s: float = 30.0) -> EtcdServer:
    """Start etcd with a fresh data directory and wait until its JSON gateway answers."""
    data_dir = Path(tempfile.mkdtemp(prefix="airflow-ml-etcd-"))
    client, peer = (f"http://127.0.0.1:{port}" for port in free_ports(2))
    process = subprocess.Popen(
        [etcd_binary(), "--name", "airflow-ml-test", "--data-dir", str(data_dir), "--listen-client-urls", client,
         "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
         "--initial-cluster", f"airflow-ml-test={peer}"],
        stdout=(data_dir / "etcd.log").open("wb"), stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{client}/health", timeout=1).read()
            return EtcdServer(client, process, data_dir)
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"etcd did not start; see {data_dir / 'etcd.log'}")
