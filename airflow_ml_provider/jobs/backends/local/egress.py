"""What a sandboxed job may reach outside its own network: each allowed endpoint, relayed by its launcher.

A job's network namespace has only its loopback: no host service (the API server, the metadata DB, another
job's rendezvous) and no other address is reachable from it. For each endpoint the deployment allows
(``host:port``; the job's artifact store and its elastic discovery store are added by the backend), the
launcher serves a Unix socket outside and the job's ``spawner`` listens for it inside: an endpoint given by
address (``127.0.0.1:9000``) is listened for at that address in the job's network, one given by name
(``s3.example.com:443``) at a loopback address of its own that the job's ``/etc/hosts`` gives that name.
Connections to anything else are refused by the job's own kernel.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit

from airflow_ml_provider.jobs.backends.local.spawner import pipe

_DEFAULT_PORTS = {"http": 80, "https": 443}
INSIDE = "/tmp/.airflow-ml-egress"  # where a job sees its relays' sockets (in its private /tmp: a short path)


def endpoint(value: str, field: str = "egress") -> tuple[str, int]:
    """``(host, port)`` of ``host:port``, ``[v6]:port`` or a URL (its scheme's port by default).

    Raises:
        ValueError: naming ``field`` and the value.
    """
    parts = urlsplit(value if "://" in value else f"tcp://{value}")
    try:
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        port = None
    if not parts.hostname or not port:
        raise ValueError(f"{field}: {value!r} is not host:port (or a URL with a host)")
    host = parts.hostname
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host, port
    if not address.is_loopback:
        raise ValueError(f"{field}: {value!r}: an address outside loopback cannot be given to a job's own network; "
                         "name the endpoint by its host name instead")
    return host, port


def listen_plan(endpoints: list[str]) -> list[dict]:
    """Where the job listens for each endpoint: ``{"host", "port", "listen": [address, port], "name"}``."""
    plan, named = [], 0
    for value in dict.fromkeys(endpoints):
        host, port = endpoint(value)
        try:
            ipaddress.ip_address(host)
            plan.append({"host": host, "port": port, "listen": [host, port], "name": None})
        except ValueError:
            named += 1
            plan.append({"host": host, "port": port, "listen": [f"127.1.{named >> 8 & 255}.{named & 255}", port],
                         "name": host})
    return plan


def hosts_file(plan: list[dict]) -> str:
    """The job's ``/etc/hosts``: its host name on its loopback (no name server answers in its network, and
    c10d, Gloo and MPI look their host up), and each named endpoint at the address relaying it."""
    names = [f"{entry['listen'][0]} {entry['name']}" for entry in plan if entry["name"]]
    return "\n".join(["127.0.0.1 localhost", "::1 localhost", f"127.0.0.1 {socket.gethostname()}", *names]) + "\n"


class Relays:
    """The launcher's end: one Unix socket per endpoint in ``directory``, each connection carried to it. The
    job sees ``directory`` at ``INSIDE`` (a Unix socket's path holds at most 107 bytes: a deep root's would not)."""

    def __init__(self, plan: list[dict], directory: Path):
        self.sockets: list[dict] = []
        self._listeners: list[socket.socket] = []
        directory.mkdir(parents=True, exist_ok=True)
        os.chmod(directory, 0o755)  # the job's user reaches the sockets, never writes beside them
        handle = os.open(directory, os.O_PATH | os.O_DIRECTORY)
        try:
            for index, entry in enumerate(plan):
                (directory / f"{index}.sock").unlink(missing_ok=True)
                listener = socket.socket(socket.AF_UNIX)
                listener.bind(f"/proc/self/fd/{handle}/{index}.sock")  # short, whatever the directory's path
                os.chmod(directory / f"{index}.sock", 0o666)
                listener.listen(64)
                self._listeners.append(listener)
                threading.Thread(target=self._serve, args=(listener, entry["host"], entry["port"]),
                                 daemon=True).start()
                self.sockets.append({"listen": entry["listen"], "socket": f"{INSIDE}/{index}.sock"})
        finally:
            os.close(handle)

    def close(self) -> None:
        for listener in self._listeners:
            listener.close()

    @staticmethod
    def _serve(listener: socket.socket, host: str, port: int) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed: the job ended
                return
            threading.Thread(target=_connect, args=(client, host, port), daemon=True).start()


def _connect(client: socket.socket, host: str, port: int) -> None:
    try:
        upstream = socket.create_connection((host, port), timeout=30)
        upstream.settimeout(None)
    except OSError:
        client.close()
        return
    pipe(client, upstream)
