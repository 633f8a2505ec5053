"""Loopback ports for a local job's processes to listen on (LightGBM's ranks, torchrun's rendezvous).

A port is only checked free here; the job's process binds it later. The kernel hands ports of its
ephemeral range (``net.ipv4.ip_local_port_range``) to every outgoing connection, and on a busy machine
one such connection took a port between the check and a LightGBM rank's bind ("Binding port N failed":
the job failed). Ports are therefore chosen below that range, where nothing is given out unasked; a
machine whose range leaves no room below it gets the OS's choice, as before.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST = 10_000  # above the registered services most machines run
_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports free right now, outside the ephemeral range where there is room."""
    sockets: list[socket.socket] = []
    tried: set[int] = set()
    low = _ephemeral_low()
    try:
        while len(sockets) < count:
            port = 0  # the kernel's choice, once the range below the ephemeral one is used up
            if low is not None and len(tried) < low - LOWEST:
                port = random.randrange(LOWEST, low)  # two launchers choosing at once rarely try the same ports
                if port in tried:
                    continue
                tried.add(port)
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # in use: try the next one
                sock.close()
                continue
            sockets.append(sock)  # held until all are found, so no two ranks get the same port
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _ephemeral_low() -> int | None:
    try:
        low = int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return low if low > LOWEST else None
