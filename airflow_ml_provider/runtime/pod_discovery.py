"""Host discovery for elastic Horovod on Kubernetes: the job's ready worker pods, read from the API.

Runs inside the launcher pod, once a second, as ``horovodrun --host-discovery-script``:
``python -m airflow_ml_provider.runtime.pod_discovery --selector LABELS --slots N`` prints ``host:N`` for
every worker pod that is Ready (its readiness probe passes: the provider's sshd workers have one on their sshd
port, so horovodrun's first ssh to a host finds it listening) and not being deleted, so an evicted pod leaves
the ring and a rescheduled or added one joins it once it can take a rank. It uses the pod's service account
(which needs ``list pods`` in its namespace: deploy/kubernetes/pod-discovery.yaml) and only the standard library,
so any training image that holds this package can run it.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from http import HTTPStatus
from pathlib import Path

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def worker_hosts(pods: list[dict]) -> list[str]:
    """Addresses of the pods that can take a rank now: the stable DNS name (hostname.subdomain, as
    Volcano's svc plugin sets) when the pod has one, else its IP; sorted, so ranks stay stable."""
    hosts = []
    for pod in pods:
        spec, status = pod.get("spec", {}), pod.get("status", {})
        if not _ready(status) or pod["metadata"].get("deletionTimestamp"):
            continue
        if spec.get("hostname") and spec.get("subdomain"):
            hosts.append(f"{spec['hostname']}.{spec['subdomain']}")
        elif status.get("podIP"):
            hosts.append(status["podIP"])
    return sorted(hosts)


def _ready(status: dict) -> bool:
    """Running with the kubelet's Ready condition True (every container started and passing its probe)."""
    return status.get("phase") == "Running" and any(
        condition.get("type") == "Ready" and condition.get("status") == "True"
        for condition in status.get("conditions") or [])


def list_pods(selector: str, service_account_dir: Path) -> list[dict]:
    """The pods matching ``selector`` in the service account's namespace, through the in-cluster API."""
    namespace = (service_account_dir / "namespace").read_text().strip()
    token = (service_account_dir / "token").read_text().strip()
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    query = urllib.parse.urlencode({"labelSelector": selector})
    request = urllib.request.Request(f"https://{host}:{port}/api/v1/namespaces/{namespace}/pods?{query}",
                                     headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
    context = ssl.create_default_context(cafile=str(service_account_dir / "ca.crt"))
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        return json.loads(response.read())["items"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_ml_provider.runtime.pod_discovery")
    parser.add_argument("--selector", required=True, help="label selector of the job's worker pods")
    parser.add_argument("--slots", type=int, default=1, help="ranks per worker pod")
    parser.add_argument("--service-account-dir", type=Path, default=Path(SERVICE_ACCOUNT_DIR))
    args = parser.parse_args(argv)
    try:
        pods = list_pods(args.selector, args.service_account_dir)
    except urllib.error.HTTPError as exc:
        if exc.code != HTTPStatus.FORBIDDEN:
            raise
        # authenticated, but its account may not list pods. Horovod 0.28.1 fails the job when its first discovery
        # fails (runner/elastic/driver.py:197-202): the launcher's log says what the pod lacks
        print(f"pod discovery: listing pods was refused ({exc.code} {exc.reason}): the pod's service account needs "
              "'list' on pods in its namespace (deploy/kubernetes/pod-discovery.yaml)", file=sys.stderr)
        return 1
    for host in worker_hosts(pods):
        print(f"{host}:{args.slots}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
