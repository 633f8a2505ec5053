"""A real, tiny Kubernetes control plane for the tests: etcd + kube-apiserver on loopback ports.

There is no scheduler, controller manager or kubelet: pods never run. Tests play the controllers by
patching ``/status`` through the API, and pod logs are served by ``FakeKubelet``, a loopback TLS
server registered as a Node's kubelet endpoint (a test double for the kubelet only; the API server
that proxies to it is real).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from airflow_ml_provider.jobs.backends.kubernetes.rest import (
    collection_path,
    dns_label,
    dns_subdomain,
    object_path,
)
from airflow_ml_provider.jobs.backends.local.ports import free_ports
from support import REPO


class ApiError(RuntimeError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


# The CRDs pinned in requirements/crds.lock, verified into the cache by `make crds` (scripts/fetch_crds.py).
CRDS_DIR = REPO / ".tools" / "crds"
TOKEN = "airflow-ml-test-token"  # user "admin", in group system:masters
# Users with no RBAC binding: "nobody" stays so (every request but discovery is forbidden); tests grant
# "trainer" exactly the permissions they mean to test with Roles.
NOBODY_TOKEN = "airflow-ml-nobody-token"
TRAINER_TOKEN = "airflow-ml-trainer-token"


def apiserver_binary() -> Path | None:
    """The kube-apiserver `make kube-apiserver` built (scripts/build_kube_apiserver.sh), if any."""
    configured = os.environ.get("KUBE_APISERVER_BIN")
    candidate = Path(configured) if configured else REPO / ".tools" / "kube-apiserver"
    return candidate if candidate.exists() and shutil.which("etcd") else None


def _self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    key_path, cert_path = directory / f"{name}.key", directory / f"{name}.crt"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                           serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


@dataclass
class KubeCluster:
    url: str
    kubeconfig: Path
    workdir: Path
    processes: list[subprocess.Popen] = field(default_factory=list)

    def request(self, method: str, path: str, body: dict | None = None,
                content_type: str = "application/json") -> dict:
        return json.loads(self.raw(method, path, body, content_type) or b"{}")

    def raw(self, method: str, path: str, body: dict | None = None, content_type: str = "application/json",
            token: str = TOKEN) -> bytes:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": content_type})
        context = ssl._create_unverified_context()  # the API server's self-generated serving certificate
        try:
            with urllib.request.urlopen(req, context=context, timeout=30) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, f"{method} {path}: {exc.code} {exc.read().decode(errors='replace')[:2000]}") from None

    def patch_status(self, path: str, status: dict) -> dict:
        """Play the controller: write the object's status through the /status subresource."""
        return self.request("PATCH", f"{path}/status", {"status": status}, "application/merge-patch+json")

    def api_client(self, token: str = TOKEN):
        from kubernetes import config

        return config.new_client_from_config(str(self.kubeconfig_for(token)))

    def kubeconfig_for(self, token: str) -> Path:
        """A kubeconfig that authenticates with ``token`` (the admin's is ``kubeconfig``)."""
        if token == TOKEN:
            return self.kubeconfig
        path = self.workdir / f"kubeconfig-{token}"
        config = json.loads(self.kubeconfig.read_text())
        config["users"][0]["user"]["token"] = token
        path.write_text(json.dumps(config))
        return path

    def grant(self, namespace: str, user: str, rules: list[dict]) -> None:
        """Give ``user`` exactly ``rules`` (RBAC PolicyRules) in ``namespace``."""
        name = f"{user}-grant"
        self.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
                     {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                      "metadata": {"name": name}, "rules": rules})
        self.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
                     {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
                      "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                      "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})

    def grant_cluster(self, user: str, rules: list[dict]) -> Callable[[], None]:
        """Give ``user`` exactly ``rules`` cluster-wide (a ClusterRole and its binding); returns what revokes them."""
        name = f"{user}-grant-{uuid.uuid4().hex[:6]}"
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        self.request("POST", f"{rbac}/clusterroles", {"apiVersion": "rbac.authorization.k8s.io/v1",
                                                      "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules})
        self.request("POST", f"{rbac}/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})

        def revoke() -> None:
            self.request("DELETE", f"{rbac}/clusterrolebindings/{name}")
            self.request("DELETE", f"{rbac}/clusterroles/{name}")

        return revoke

    def audited(self, namespace: str | None) -> list[dict]:
        """What the API server's audit log says was asked of it in ``namespace`` (None: of cluster-wide
        objects, such as Nodes), one event per request, when it started to be answered, beside who asked
        (``user``, ``userAgent``)."""
        events = {}
        for line in (self.workdir / "audit.log").read_text().splitlines():
            event = json.loads(line)
            if event.get("objectRef", {}).get("namespace") == namespace:
                events.setdefault(event["auditID"], event)
        return list(events.values())

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)


def new_namespace(cluster: KubeCluster, monkeypatch, kubeconfig: Path | None = None) -> str:
    """A fresh namespace, and the connection pointing Airflow at it (as a user would configure)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    kube = {"conn_type": "kubernetes",
            "extra": {"kube_config_path": str(kubeconfig or cluster.kubeconfig), "namespace": name}}
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(kube))
    return name


def start_cluster(binary: Path, crds: list[Path] | None = None) -> KubeCluster:
    """etcd + kube-apiserver with ``crds`` installed (default: every CRD in CRDS_DIR)."""
    workdir = Path(tempfile.mkdtemp(prefix="kube-test-"))
    client_port, peer_port, api_port = free_ports(3)
    etcd = subprocess.Popen(
        ["etcd", "--data-dir", str(workdir / "etcd"), "--listen-client-urls", f"http://127.0.0.1:{client_port}",
         "--advertise-client-urls", f"http://127.0.0.1:{client_port}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer_port}"],
        stdout=(workdir / "etcd.log").open("wb"), stderr=subprocess.STDOUT)
    cluster = KubeCluster(f"https://127.0.0.1:{api_port}", workdir / "kubeconfig", workdir, [etcd])
    try:
        sa_key, _ = _self_signed(workdir, "service-account")
        (workdir / "tokens.csv").write_text(f'{TOKEN},admin,admin,"system:masters"\n'
                                            f"{NOBODY_TOKEN},nobody,nobody\n{TRAINER_TOKEN},trainer,trainer\n")
        apiserver = subprocess.Popen(
            [str(binary), f"--etcd-servers=http://127.0.0.1:{client_port}", "--bind-address=127.0.0.1",
             "--advertise-address=127.0.0.1", f"--secure-port={api_port}", f"--cert-dir={workdir / 'certs'}",
             "--service-cluster-ip-range=10.96.0.0/24", f"--service-account-key-file={sa_key}",
             f"--service-account-signing-key-file={sa_key}", "--service-account-issuer=https://kubernetes.default",
             f"--token-auth-file={workdir / 'tokens.csv'}", "--authorization-mode=RBAC",
             "--disable-admission-plugins=ServiceAccount", "--endpoint-reconciler-type=none",
             "--kubelet-preferred-address-types=InternalIP", f"--audit-policy-file={_audit_policy(workdir)}",
             f"--audit-log-path={workdir / 'audit.log'}", "--audit-log-mode=blocking"],
            stdout=(workdir / "apiserver.log").open("wb"), stderr=subprocess.STDOUT)
        cluster.processes.append(apiserver)
        _wait_ready(cluster)
        cluster.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": cluster.url, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "admin", "user": {"token": TOKEN}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
        }))
        _install_crds(cluster, sorted(CRDS_DIR.glob("*.yaml")) if crds is None else crds)
        return cluster
    except BaseException:
        cluster.stop()
        raise


def _audit_policy(workdir: Path) -> Path:
    """Every request of the tests' users at Metadata level (a watch twice: started, ended)."""
    path = workdir / "audit-policy.json"
    path.write_text(json.dumps({"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
                                "omitStages": ["RequestReceived"],
                                "rules": [{"level": "Metadata", "users": ["admin", "trainer", "nobody"]}]}))
    return path


def _wait_ready(cluster: KubeCluster, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if cluster.raw("GET", "/readyz") == b"ok":
                return
        except Exception:  # noqa: BLE001 - not up yet
            if any(proc.poll() is not None for proc in cluster.processes):
                raise RuntimeError(f"control plane exited; see {cluster.workdir}/*.log") from None
            time.sleep(0.3)
    raise RuntimeError(f"kube-apiserver not ready after {timeout_s}s; see {cluster.workdir}/apiserver.log")


def _for_kubernetes_1_20(schema):
    """Kubernetes 1.20 reads ``default: ""`` in a CRD schema as null and rejects it ("must be of type
    string"), which newer servers accept; Volcano's Job CRD has 33 of them, all inside embedded pod
    templates. Those defaults are dropped, and so is the list-map marker of the few lists whose key
    then has no default (1.20 requires one): only defaulting and server-side-apply merge semantics
    change; every type, enum, pattern and required list, and so validation, stays as shipped."""
    if isinstance(schema, list):
        return [_for_kubernetes_1_20(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    fixed = {k: _for_kubernetes_1_20(v) for k, v in schema.items() if not (k == "default" and v == "")}
    items = fixed.get("items", {})
    keys = fixed.get("x-kubernetes-list-map-keys", [])
    if any("default" not in items.get("properties", {}).get(key, {}) and key not in items.get("required", [])
           for key in keys):
        fixed.pop("x-kubernetes-list-map-keys")
        fixed.pop("x-kubernetes-list-type", None)
    return fixed


def _install_crds(cluster: KubeCluster, paths: list[Path]) -> None:
    import yaml

    names = []
    for path in paths:  # libyaml's parser where PyYAML has it: 0.3 CPU s for the 13 CRDs, 3.9 in Python
        crd = _for_kubernetes_1_20(yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
        cluster.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        names.append(crd["metadata"]["name"])
    for name in names:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            crd = cluster.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            time.sleep(0.2)
        else:
            raise RuntimeError(f"CRD {name} not established")
    time.sleep(1)  # the new resources need a moment to appear in discovery and the storage layer


def tls_server(handler: type[BaseHTTPRequestHandler], directory: Path, name: str) -> ThreadingHTTPServer:
    """``handler`` served over TLS on a loopback port, with a self-signed certificate ``name`` made in
    ``directory``, in a daemon thread of its own (the test doubles an API server reaches: the kubelet's log
    endpoint, metrics-server)."""
    key, cert = _self_signed(directory, name)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True, name=name).start()
    return server


class FakeKubelet:
    """Serves ``/containerLogs/{namespace}/{pod}/{container}`` (with ``timestamps`` and ``sinceTime``) over
    TLS on loopback, from lines the test appends. A test double for the kubelet's log endpoint only."""

    def __init__(self, workdir: Path):
        self.logs: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
        kubelet = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                url = urlparse(self.path)
                parts = url.path.strip("/").split("/")
                if len(parts) != 4 or parts[0] != "containerLogs":
                    self.send_error(404)
                    return
                query = parse_qs(url.query)
                since = query.get("sinceTime", [None])[0]
                with_ts = query.get("timestamps", ["false"])[0] == "true"
                lines = kubelet.logs.get(tuple(parts[1:]), [])
                out = [f"{ts} {text}" if with_ts else text for ts, text in lines
                       if since is None or ts[:19] >= since.rstrip("Z")[:19]]
                body = "".join(line + "\n" for line in out).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = tls_server(Handler, workdir, "kubelet")
        self.port = self.server.server_address[1]

    def append(self, namespace: str, pod: str, container: str, text: str, timestamp: str | None = None) -> None:
        stamp = timestamp or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        self.logs.setdefault((namespace, pod, container), []).append((stamp, text))

    def register_node(self, cluster: KubeCluster, name: str = "fake-node") -> str:
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                           "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}}}}
        cluster.request("POST", "/api/v1/nodes", node)
        cluster.patch_status(f"/api/v1/nodes/{name}", node["status"])
        return name

    def stop(self) -> None:
        self.server.shutdown()


def play_mpi_operator(cluster: KubeCluster, kubelet: FakeKubelet, namespace: str, lines: list[str],
                      timeout: float = 120.0) -> threading.Event:
    """In a thread, what the MPI operator and the job's launcher do for the first MPIJob to appear in
    ``namespace``: create its launcher pod (with the job's labels), mark it Running, have the pod print
    ``lines``, then mark it Succeeded. The returned event is set once it has."""
    from support import wait_for

    done = threading.Event()
    listing = f"/apis/kubeflow.org/v2beta1/namespaces/{namespace}/mpijobs"

    def run() -> None:
        job = wait_for(lambda: next(iter(cluster.request("GET", listing)["items"]), None), timeout, "the MPIJob")
        name = job["metadata"]["name"]
        launcher = f"{name}-launcher"
        cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": launcher, "namespace": namespace, "labels": job["metadata"]["labels"]},
            "spec": {"nodeName": "fake-node", "containers": [{"name": "worker", "image": "img:1"}]}})
        cluster.patch_status(f"{listing}/{name}", {"conditions": [
            {"type": "Running", "status": "True", "lastTransitionTime": "2026-11-21T00:00:00Z"}]})
        for line in lines:
            kubelet.append(namespace, launcher, "worker", line)
        cluster.patch_status(f"{listing}/{name}", {"conditions": [
            {"type": "Succeeded", "status": "True", "lastTransitionTime": "2026-11-21T00:01:00Z"}]})
        done.set()

    threading.Thread(target=run, daemon=True, name="mpi-operator double").start()
    return done


def resource_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    """A concrete API path of a collection or one object, as the tests address objects directly."""
    if name is None:
        return collection_path(api_version, kind).format(namespace=dns_label("namespace", namespace))
    return object_path(api_version, kind).format(namespace=dns_label("namespace", namespace),
                                                 name=dns_subdomain("name", name))
