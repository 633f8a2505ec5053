"""An S3 API on loopback (moto, a test double of S3: see tests/s3_server.py) for the storage tests."""

from __future__ import annotations

import pytest
from s3_server import S3Server, start_s3_server


@pytest.fixture(scope="session")
def s3() -> S3Server:
    server = start_s3_server()
    yield server
    server.stop()


@pytest.fixture
def bucket(s3) -> str:
    return s3.new_bucket()


@pytest.fixture
def s3_worker_env(s3, monkeypatch) -> dict[str, str]:
    """This test process as a worker would be: the S3 variables a backend hands a job."""
    env = s3.worker_env()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env
