"""Airflow's own stats sending StatsD datagrams to a loopback UDP socket the test reads back."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator


def loopback_statsd(monkeypatch, **settings: str) -> Iterator[Callable[[], list[str]]]:
    """Configure ``[metrics]`` (StatsD on, this socket, plus ``settings``) as a task process does;
    yields a function returning the datagrams received since its last call. For ``yield from`` in a
    fixture: the stats logger is reset afterwards."""
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    for key, value in {"STATSD_ON": "True", "STATSD_HOST": "127.0.0.1", "STATSD_PORT": str(sock.getsockname()[1]),
                       **settings}.items():
        monkeypatch.setenv(f"AIRFLOW__METRICS__{key}", value)
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)

    def received() -> list[str]:
        lines = []
        try:
            while True:
                lines += sock.recv(65536).decode().splitlines()
        except TimeoutError:
            return lines

    yield received
    stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
    sock.close()
