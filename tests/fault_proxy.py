"""TEST TOOL: a loopback TCP proxy that can cut a server off, so outage tests run unchanged against
the Elasticsearch test double and a real Elasticsearch alike.

Modes: ``forward`` (pass bytes both ways), ``refuse`` (every connection is reset at once: the server
"stops answering"), ``unavailable`` (every HTTP request gets a 503, as from a load balancer in front
of a cluster that is down). Switching away from ``forward`` drops connections already open, so a
client's pooled keep-alive connections fail too. An outage can start by itself once ``cut_after``
bytes have come back from the server, i.e. in the middle of a long read.
"""

from __future__ import annotations

import socket
import struct
import threading

_BODY = b'{"error":{"type":"unavailable","reason":"proxy: cluster unavailable"},"status":503}'
_UNAVAILABLE = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
                b"Content-Length: " + str(len(_BODY)).encode() + b"\r\n\r\n" + _BODY)


class FaultProxy:
    def __init__(self, target_url: str):
        host_port = target_url.split("://", 1)[-1].split("/", 1)[0]
        host, _, port = host_port.rpartition(":")
        self.target = (host, int(port))
        self.mode = "forward"
        self.cut_after: int | None = None
        self.bytes_back = 0
        self.cut = threading.Event()  # set when an automatic outage began
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, name="fault-proxy", daemon=True).start()

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self._listener.getsockname()[1]

    def set_mode(self, mode: str) -> None:
        assert mode in ("forward", "refuse", "unavailable"), mode
        with self._lock:
            self.mode = mode
            doomed, self._open = self._open, set()
        for sock in doomed:
            _reset(sock)

    def close(self) -> None:
        self._listener.close()
        self.set_mode("refuse")

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            mode = self.mode
            if mode == "refuse":
                _reset(client)
            elif mode == "unavailable":
                threading.Thread(target=_answer_503, args=(client,), daemon=True).start()
            else:
                threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def _forward(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target)
        except OSError:
            _reset(client)
            return
        with self._lock:
            self._open.update((client, upstream))
        threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
        self._pump(upstream, client, True)

    def _pump(self, source: socket.socket, sink: socket.socket, from_server: bool) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
                if from_server and self._count(len(data)):
                    self.set_mode("refuse")
                    self.cut.set()
                    return
        except OSError:
            pass
        for sock in (source, sink):
            _reset(sock)

    def _count(self, n: int) -> bool:
        with self._lock:
            self.bytes_back += n
            if self.cut_after is not None and self.bytes_back >= self.cut_after:
                self.cut_after = None
                return True
        return False


def _answer_503(client: socket.socket) -> None:
    try:
        client.settimeout(5)
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = client.recv(65536)
            if not chunk:
                break
            request += chunk
        client.sendall(_UNAVAILABLE)
    except OSError:
        pass
    client.close()


def _reset(sock: socket.socket) -> None:
    """Drop a connection so that its peer sees it fail (RST where possible) and any thread blocked
    reading it here wakes up (closing alone would not wake it)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
