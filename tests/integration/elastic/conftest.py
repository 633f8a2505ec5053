"""A real etcd for the elastic tests (skipped, with the reason, without Debian's etcd-server)."""

from __future__ import annotations

import pytest
from etcd_server import EtcdServer, etcd_binary, start_etcd


@pytest.fixture(scope="session")
def etcd() -> EtcdServer:
    if etcd_binary() is None:
        pytest.skip("no etcd binary: apt-get install etcd-server")
    server = start_etcd()
    yield server
    server.stop()
