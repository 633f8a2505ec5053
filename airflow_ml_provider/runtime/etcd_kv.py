"""A minimal etcd v3 key-value client over etcd's JSON gateway (``/v3/kv/*``), using only the stdlib.

Why not a client library: the host discovery script runs once a second inside the training
environment, where neither ``aetcd`` nor gRPC is installed, and it needs three calls only.
"""

from __future__ import annotations

import base64
import json
import urllib.request


class EtcdError(RuntimeError):
    """etcd could not be reached or refused the request."""


class EtcdKV:
    """Put, delete and list keys under a prefix on one etcd endpoint such as ``http://127.0.0.1:2379``."""

    def __init__(self, endpoint: str, timeout_s: float = 5.0):
        self.endpoint = endpoint.rstrip("/")
        self.timeout_s = timeout_s

    def put(self, key: str, value: str) -> None:
        self._call("put", {"key": _b64(key), "value": _b64(value)})

    def delete_prefix(self, prefix: str) -> None:
        self._call("deleterange", {"key": _b64(prefix), "range_end": _b64(_prefix_end(prefix))})

    def get_prefix(self, prefix: str) -> dict[str, str]:
        """Every key under ``prefix`` with its value."""
        reply = self._call("range", {"key": _b64(prefix), "range_end": _b64(_prefix_end(prefix))})
        return {_unb64(kv["key"]): _unb64(kv.get("value", "")) for kv in reply.get("kvs", [])}

    def _call(self, method: str, body: dict) -> dict:
        request = urllib.request.Request(f"{self.endpoint}/v3/kv/{method}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read())
        except OSError as exc:
            raise EtcdError(f"etcd at {self.endpoint}: {method} failed: {exc}") from None


def _prefix_end(prefix: str) -> str:
    """The first key after every key that starts with ``prefix`` (etcd's range_end convention)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _unb64(text: str) -> str:
    return base64.b64decode(text).decode()
