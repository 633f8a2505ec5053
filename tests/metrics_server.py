"""A stand-in for metrics-server, which cannot run here (it scrapes kubelets, and the tests' cluster has none): the
resource metrics API ``metrics.k8s.io/v1beta1`` served over TLS on loopback and registered with the real
kube-apiserver (tests/kube_cluster.py) as an aggregated API, as metrics-server's own manifests register it: the
APIService ``v1beta1.metrics.k8s.io`` with ``insecureSkipTLSVerify`` (manifests/base/apiservice.yaml:1-14 of
kubernetes-sigs/metrics-server at v0.8.1, 9ce65a47f9262e19e482c259ace815f01135a898). Its Service is an ExternalName
one, ``localhost`` and this server's port: the aggregator routes an ExternalName Service to
``https://<externalName>:<port>`` (k8s.io/apiserver pkg/util/proxy/proxy.go, ``ResolveCluster``; named by function
only, the kubernetes repository is too large to fetch here), where a cluster's would reach metrics-server's pod.
So the real API server authenticates and authorizes every request (RBAC on metrics.k8s.io pods: a user without it
gets the real server's 403) and answers 404 where no such API is registered; this server sees only what it lets
through.

What it answers, in metrics-server's shape at v0.8.1:

- ``GET /apis/metrics.k8s.io/v1beta1``: the APIResourceList of ``pods`` and ``nodes`` (pkg/api/install.go:45-54),
  which the aggregator reads to mark the APIService Available;
- ``GET .../namespaces/<ns>/pods[?labelSelector=]``: a PodMetricsList of the namespace's pods that match the
  selector (listed from the real API server, as metrics-server filters its pod lister: pkg/api/pod.go:80-110),
  sorted by name (pod.go:172-177), each pod only once two samples of every container are kept
  (pkg/storage/pod.go:48-60), as ``{"metadata": {name, namespace, labels, creationTimestamp: now}, "timestamp",
  "window", "containers": [{"name", "usage": {"cpu", "memory"}}]}`` (pod.go:86-96); ``.../pods/<name>`` one
  PodMetrics, 404 when it has none (pkg/api/pod.go:113-138). Nodes are not served.
- ``cpu``: the CPU used between the last two samples over their window, in nanocores, as a DecimalSI quantity of
  scale -9; ``memory``: the working set in bytes, BinarySI (pkg/storage/types.go:53-69), both written as Quantity's
  canonical form (kubernetes/apimachinery v0.33.4, 173776a0582da70432e19d16eca025c451600ae8:
  pkg/api/resource/quantity.go:424-462 and amount.go:257-295): ``"987654321n"``, ``"250m"``, ``"2"``;
  ``"1048576Ki"``, ``"512Mi"``, ``"1000"`` (a value below 1024, or not a multiple of it, in decimal).

Where the numbers come from: each container the test names is a real process on this machine (``measure``), sampled
every ``resolution`` seconds as metrics-server scrapes the kubelet (every 15 s in its manifests; 1 s here): CPU from
the process's own ``/proc/<pid>/stat`` (utime + stime, the kubelet's cumulative usageCoreNanoSeconds of the
container's cgroup), memory its resident set from ``/proc/<pid>/status`` (VmRSS; the kubelet reports the cgroup's
working set, which a process without a cgroup of its own does not have). The figures are that process's, never
invented.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, quote, urlparse

from kube_cluster import KubeCluster, tls_server

GROUP_VERSION = "metrics.k8s.io/v1beta1"
_TICK_NS = 1e9 / os.sysconf("SC_CLK_TCK")
_DECIMAL_SUFFIX = {-9: "n", -6: "u", -3: "m", 0: ""}  # suffix.go:123-126
_POD_PATH = re.compile(r"/apis/metrics\.k8s\.io/v1beta1/namespaces/([a-z0-9-]+)/pods(?:/([a-z0-9.-]+))?")


def cpu_quantity(nanocores: int) -> str:
    """``nanocores`` as a DecimalSI quantity of scale -9 writes itself: trailing zeros in threes become the next
    suffix (amount.go:257-283), n, u, m or none."""
    if nanocores == 0:
        return "0"
    exponent = -9
    while nanocores % 1000 == 0 and exponent < 0:
        nanocores, exponent = nanocores // 1000, exponent + 3
    return f"{nanocores}{_DECIMAL_SUFFIX[exponent]}"


def memory_quantity(size: int) -> str:
    """``size`` bytes as a BinarySI quantity writes itself: below 1024 in decimal (quantity.go:434-436), else its
    factors of 1024 as Ki, Mi, Gi... (amount.go:286-295); a size that is not a multiple of 1024 stays in bytes."""
    if size < 1024:
        return str(size)
    suffixes, power = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"], 0
    while size % 1024 == 0 and power < 6:
        size, power = size // 1024, power + 1
    return f"{size}{suffixes[power]}"


def _process_usage(pid: int) -> tuple[int, int]:
    """A process's cumulative CPU (ns) and resident set (bytes), from its own /proc files."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    cpu_ns = int((int(fields[11]) + int(fields[12])) * _TICK_NS)  # utime, stime (fields 14 and 15 of stat)
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kib = int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)[1])
    return cpu_ns, rss_kib * 1024


def _rfc3339(when: float) -> str:
    return datetime.datetime.fromtimestamp(when, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class MetricsServer:
    """The stand-in, serving while alive; ``register`` makes ``cluster`` route metrics.k8s.io to it."""

    def __init__(self, cluster: KubeCluster, resolution_s: float = 1.0):
        self.cluster, self.resolution_s = cluster, resolution_s
        self.processes: dict[tuple[str, str, str], int] = {}  # (namespace, pod, container) -> pid
        # (namespace, pod, container) -> the last two samples, (when, cumulative CPU ns, resident bytes)
        self.samples: dict[tuple[str, str, str], list[tuple[float, int, int]]] = {}
        self.requests: list[str] = []  # the paths (and queries) asked of it
        self._lock, self._stop = threading.Lock(), threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                server.requests.append(self.path)
                status, body = server.answer(self.path)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.http = tls_server(Handler, cluster.workdir, "metrics-server")
        self.port = self.http.server_address[1]
        threading.Thread(target=self._scrape, daemon=True, name="metrics-server scrape").start()

    def register(self, timeout_s: float = 60) -> None:
        """The Service and APIService metrics-server's manifests create, then wait until the aggregator finds it."""
        self.cluster.request("POST", "/api/v1/namespaces/kube-system/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "metrics-server", "namespace": "kube-system"},
            "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": self.port}]}})
        self.cluster.request("POST", "/apis/apiregistration.k8s.io/v1/apiservices", {
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1beta1.metrics.k8s.io"},
            "spec": {"service": {"name": "metrics-server", "namespace": "kube-system", "port": self.port},
                     "group": "metrics.k8s.io", "version": "v1beta1", "insecureSkipTLSVerify": True,
                     "groupPriorityMinimum": 100, "versionPriority": 100}})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            service = self.cluster.request("GET", "/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.metrics.k8s.io")
            if any(c["type"] == "Available" and c["status"] == "True"
                   for c in service.get("status", {}).get("conditions", [])):
                return
            time.sleep(0.2)
        raise TimeoutError(f"the APIService never became Available: {service.get('status')}")

    def measure(self, namespace: str, pod: str, container: str, pid: int) -> None:
        """Report container ``container`` of ``pod`` as what process ``pid`` uses."""
        with self._lock:
            self.processes[namespace, pod, container] = pid

    def measured(self, namespace: str, pods: list[str]) -> bool:
        """Whether each of ``pods`` has a container with the two samples a PodMetrics needs."""
        with self._lock:
            return all(any((ns, name) == (namespace, pod) and len(samples) == 2
                           for (ns, name, _), samples in self.samples.items()) for pod in pods)

    def _scrape(self) -> None:
        while not self._stop.wait(self.resolution_s):
            with self._lock:
                processes = dict(self.processes)
            for key, pid in processes.items():
                try:
                    cpu_ns, rss = _process_usage(pid)
                except (OSError, TypeError, IndexError):  # the process is gone: no more samples
                    continue
                with self._lock:
                    self.samples[key] = (self.samples.get(key, []) + [(time.time(), cpu_ns, rss)])[-2:]

    def answer(self, path: str) -> tuple[int, dict]:
        url = urlparse(path)
        if url.path.rstrip("/") == f"/apis/{GROUP_VERSION}":
            return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION, "resources": [
                {"name": "nodes", "singularName": "", "namespaced": False, "kind": "NodeMetrics", "verbs": ["get", "list"]},
                {"name": "pods", "singularName": "", "namespaced": True, "kind": "PodMetrics", "verbs": ["get", "list"]}]}
        if not (match := _POD_PATH.fullmatch(url.path)):
            return 404, _status(404, "NotFound", f"the server could not find the requested resource ({url.path})")
        namespace, name = match.groups()
        selector = parse_qs(url.query).get("labelSelector", [""])[0]
        listing = self.cluster.request(
            "GET", f"/api/v1/namespaces/{namespace}/pods" + (f"?labelSelector={quote(selector)}" if selector else ""))
        items = [item for pod in sorted(listing.get("items", []), key=lambda pod: pod["metadata"]["name"])
                 if (name is None or pod["metadata"]["name"] == name) and (item := self._pod_metrics(pod)) is not None]
        if name is None:
            return 200, {"kind": "PodMetricsList", "apiVersion": GROUP_VERSION, "metadata": {}, "items": items}
        if not items:
            return 404, _status(404, "NotFound", f'podmetrics.metrics.k8s.io "{namespace}/{name}" not found')
        return 200, items[0]

    def _pod_metrics(self, pod: dict) -> dict | None:
        meta = pod["metadata"]
        with self._lock:
            kept = {container: samples for (ns, name, container), samples in self.samples.items()
                    if ns == meta["namespace"] and name == meta["name"]}
        if not kept or any(len(samples) < 2 for samples in kept.values()):
            return None
        containers, first, window = [], None, 0.0
        for container, ((before, cpu_before, _), (at, cpu_at, rss)) in sorted(kept.items()):
            nanocores = int((cpu_at - cpu_before) / (at - before))
            containers.append({"name": container, "usage": {"cpu": cpu_quantity(nanocores),
                                                            "memory": memory_quantity(rss)}})
            if first is None or at < first:
                first, window = at, at - before
        return {"metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": meta.get("labels", {}),
                             "creationTimestamp": _rfc3339(time.time())},
                "timestamp": _rfc3339(first), "window": f"{window:.3f}s", "containers": containers}

    def stop(self) -> None:
        self._stop.set()
        self.http.shutdown()


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
