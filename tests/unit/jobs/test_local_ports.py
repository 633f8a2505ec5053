"""The local launcher's ports for LightGBM's ranks and torchrun's rendezvous lie below the kernel's ephemeral
range, which the OS gives to outgoing connections: one taken between the check and a rank's bind failed a
LightGBM job in a full run ("Binding port N failed")."""

from __future__ import annotations

import random
import socket
from pathlib import Path

from airflow_ml_provider.jobs.backends.local import ports
from airflow_ml_provider.jobs.backends.local.ports import LOWEST, free_ports


def test_ports_are_distinct_free_and_below_the_ephemeral_range():
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = free_ports(8)
    assert len(set(ports)) == 8
    assert all(LOWEST <= port < low for port in ports), (ports, low)
    for port in ports:  # free: each one binds
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_in_use_is_not_given_out(tmp_path, monkeypatch):
    """A range whose ephemeral part starts 60 ports above the lowest: 50 of those 60 held open, the 10 ports
    asked for are exactly the other 10. The window is one whose 60 ports were all free a moment ago (a fixed one
    collided with a job of another test process, whose ports come from the same range)."""
    base, held = _held_window(60)
    try:
        kernel_range = tmp_path / "ip_local_port_range"
        kernel_range.write_text(f"{base + 60}\t60999\n")
        monkeypatch.setattr(ports, "_RANGE", kernel_range)
        monkeypatch.setattr(ports, "LOWEST", base)
        for sock in held[50:]:  # the 10 to be given out
            sock.close()
        assert set(free_ports(10)) == set(range(base, base + 60)) - {sock.getsockname()[1] for sock in held[:50]}
    finally:
        for sock in held:
            sock.close()


def _held_window(size: int) -> tuple[int, list[socket.socket]]:
    """A first port and ``size`` sockets bound to it and the ports after it, all held."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(100):
        base, held = random.randrange(LOWEST, low - size), []
        try:
            for port in range(base, base + size):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
            return base, held
        except OSError:  # in use: another window
            for sock in held:
                sock.close()
    raise AssertionError(f"no {size} consecutive free ports below {low}")
