"""An S3 API on loopback for the object-storage tests: moto's server mode (``ThreadedMotoServer``).

moto is a TEST DOUBLE of Amazon S3, not S3: it speaks the S3 REST API that s3fs, boto3, MLflow and
Airflow's ObjectStoragePath use (buckets, put/get/list/head/delete objects, multipart), keeps objects
in memory, and accepts any credentials. It is the widely used stand-in for S3 in tests; no real
object store can be installed on this machine. What it cannot show: IAM policies, eventual
consistency, real latency.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass

ACCESS_KEY = "test-access-key"
SECRET_KEY = "test-secret-key-not-a-real-one"
REGION = "us-east-1"


@dataclass
class S3Server:
    url: str
    _server: object

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.url, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name=REGION)

    def new_bucket(self, prefix: str = "aml") -> str:
        bucket = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.client().create_bucket(Bucket=bucket)
        return bucket

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def worker_env(self) -> dict[str, str]:
        """What an S3 client in a worker needs: endpoint, region and (test) credentials."""
        return {"AWS_ENDPOINT_URL_S3": self.url, "AWS_DEFAULT_REGION": REGION,
                "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}

    def airflow_connection(self) -> str:
        """An ``aws`` connection (as ``AIRFLOW_CONN_<ID>`` JSON) whose ``endpoint_url`` extra points here."""
        return json.dumps({"conn_type": "aws", "login": ACCESS_KEY, "password": SECRET_KEY,
                           "extra": {"endpoint_url": self.url, "region_name": REGION}})

    def stop(self) -> None:
        self._server.stop()


def start_s3_server() -> S3Server:
    """Start moto's S3 server on a free loopback port."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    server.start()
    host, port = server.get_host_and_port()
    return S3Server(f"http://{host}:{port}", server)
