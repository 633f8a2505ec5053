"""The local launcher's ports for LightGBM's ranks and torchrun's rendezvous lie below the kernel's ephemeral
range, which the OS gives to outgoing connections: one taken between the check and a rank's bind failed a
LightGBM job in a full run ("Binding port N failed")."""

from __future__ import annotations

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
    asked for are exactly the other 10."""
    kernel_range = tmp_path / "ip_local_port_range"
    kernel_range.write_text(f"{LOWEST + 60}\t60999\n")
    monkeypatch.setattr(ports, "_RANGE", kernel_range)
    window = set(range(LOWEST, LOWEST + 60))
    held = []
    try:
        for port in sorted(window)[:50]:
            sock = socket.socket()
            sock.bind(("127.0.0.1", port))
            held.append(sock)
        assert set(free_ports(10)) == window - {sock.getsockname()[1] for sock in held}
    finally:
        for sock in held:
            sock.close()
