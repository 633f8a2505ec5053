"""A controller stand-in's pods as Pod objects of a real kube-apiserver (tests/kube_cluster.py), their phase reported
as a kubelet would, for the programs inside a pod that read the API: the elastic Horovod master's
``runtime.pod_discovery``, which lists the job's Running worker pods with its service account.

What a kubelet gives every pod that this reproduces (kubernetes pkg/kubelet/kubelet_pods.go, the service
environment, and the service account token volume of plugin/pkg/admission/serviceaccount; named by file only, as
tests/pod_containers.py does: the kubernetes repository is too large to fetch here):

- ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT``, the API server's address. A cluster gives the
  ``kubernetes`` Service's ClusterIP; here it is ``kubernetes.default.svc`` (a name the API server's own serving
  certificate carries, as it carries that IP), which every pod of the network resolves to a relay on the network's
  gateway that forwards to the API server on the host's loopback;
- ``/var/run/secrets/kubernetes.io/serviceaccount``: ``namespace``, ``token`` (a user of the API server's token
  file that the test grants exactly the rules the pods' service account needs) and ``ca.crt`` (the API server's
  self-generated certificate chain, its CA included);
- ``status.phase`` from the container: Running while it runs (or restarts in place under OnFailure), Succeeded or
  Failed once it stopped for good, as the controller stand-in reads it;
- the ``Ready`` condition (pkg/kubelet/status/generate.go, ``GeneratePodReadyCondition``): True once the pod runs
  and its container passes its readiness probe (a TCP check here, the only kind the provider renders), or at once
  when the container has no probe; False otherwise.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
from pathlib import Path

from kube_cluster import KubeCluster
from pod_containers import PodNetwork
from training_image import podman

API_HOST = "kubernetes.default.svc"  # in the API server's serving certificate (DNS:kubernetes.default.svc)
SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


class _Relay:
    """TCP to ``target`` (the API server on loopback) for the containers of ``subnet``, the network's: it listens on
    every address (the network's bridge, its gateway, exists only once a container is on it) and closes any other
    peer's connection at once."""

    def __init__(self, subnet: str, target: tuple[str, int]):
        self.subnet, self.target = ipaddress.ip_network(subnet), target
        self.server = socket.create_server(("0.0.0.0", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, (peer, _) = self.server.accept()
            except OSError:  # closed
                return
            if ipaddress.ip_address(peer) not in self.subnet:
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.server.close()


class PodApi:
    """The pods of one namespace of ``cluster``, kept in step with their containers on ``network``."""

    def __init__(self, cluster: KubeCluster, namespace: str, network: PodNetwork, directory: Path, token: str):
        self.cluster, self.namespace = cluster, namespace
        (subnet,) = json.loads(podman("network", "inspect", network.network).stdout)[0]["subnets"]
        gateway = subnet["gateway"]
        api = cluster.url.removeprefix("https://").rsplit(":", 1)
        self.relay = _Relay(subnet["subnet"], (api[0], int(api[1])))
        self.hosts = {API_HOST: gateway}
        self.env = {"KUBERNETES_SERVICE_HOST": API_HOST, "KUBERNETES_SERVICE_PORT": str(self.relay.port)}
        account = directory / "serviceaccount"
        account.mkdir(parents=True)
        (account / "namespace").write_text(namespace)
        (account / "token").write_text(token)
        (account / "ca.crt").write_bytes((cluster.workdir / "certs" / "apiserver.crt").read_bytes())
        for path in account.iterdir():
            path.chmod(0o644)  # the token volume's files are readable by the pod's user
        self.mounts = {SERVICE_ACCOUNT_MOUNT: account}
        self.phases: dict[str, tuple[str, bool]] = {}

    def _path(self, name: str = "") -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods{'/' + name if name else ''}"

    def create(self, name: str, template: dict, subdomain: str) -> None:
        """The Pod a controller creates from ``template`` (its labels, hostname and subdomain), still Pending."""
        spec = template["spec"]
        self.cluster.request("POST", self._path(), {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": (template.get("metadata") or {}).get("labels") or {}},
            "spec": {"hostname": name, "subdomain": subdomain, "restartPolicy": spec.get("restartPolicy", "Always"),
                     "containers": [{"name": c["name"], "image": c["image"]} for c in spec["containers"]]}})
        self.phases[name] = ("Pending", False)

    def report(self, name: str, phase: str, ready: bool) -> None:
        """The kubelet's status update, when the pod's phase or readiness changed."""
        if self.phases.get(name) != (phase, ready):
            self.cluster.patch_status(self._path(name), {"phase": phase, "conditions": [
                {"type": "Ready", "status": str(ready and phase == "Running")}]})
            self.phases[name] = (phase, ready)

    def delete(self, name: str) -> None:
        self.cluster.request("DELETE", self._path(name))
        self.phases.pop(name, None)

    def close(self) -> None:
        self.relay.close()
