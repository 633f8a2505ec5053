"""Issue 39, F5: an Indexed Job's PyTorch pods train even while pod 0's name does not resolve yet.

Pod 0's stable name, ``<job>-0.<job>``, exists only in cluster DNS, as a record of the job's headless
Service, which appears once the pod has an address and the Service's EndpointSlice is published: a pod can
start before it. The kubelet's /etc/hosts holds only the pod's own FQDN and hostname (kubernetes
pkg/kubelet/kubelet_pods.go ``managedHostsFileContent``), never ``<job>-0.<job>``. With c10d rendezvous at
``<job>-0.<job>:29400`` (the render before the fix) the agent that hosts the store is the one whose machine
that name resolves to, decided once when it starts (torch 2.13.0 c10d_rendezvous_backend.py:145,
``_matches_machine_hostname``): with the record missing then, no agent hosts it and every agent waits until
its rendezvous times out. With static rendezvous (node rank from the completion index) pod 0 is the host by its
rank (static_tcp_rendezvous.py:65), and each agent's connection to the name retries until the record is there.

Each pod here is what the Job controller and the kubelet make of the rendered template, and nothing more:
the container's command and env as rendered, ``JOB_COMPLETION_INDEX`` appended (pkg/controller/job/
indexed_job_utils.go ``addCompletionIndexEnvVariable``), hostname ``<job>-<index>`` (job_controller.go),
``$(VAR)`` in the command expanded from the container's env (pkg/kubelet/container/helpers.go
``ExpandContainerCommandAndArgs``), and an /etc/hosts of its own with the kubelet's lines. Cluster DNS is played
by the same files: the peers' ``<hostname>.<job>`` names are appended to them, pod 0's only after
``DNS_DELAY_S``. The pods share one network namespace of their own (a loopback address each), so nothing
outside it is reached. Each runs in bubblewrap (its own UTS namespace, /etc/hosts bind-mounted); the local
training environment stands in for the image (first on PATH, as /opt/venv is in images/training/Dockerfile).
Needs root (network namespaces) and bubblewrap (scripts/install_bwrap.sh).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from support import TRAINING_IMAGE, needs_torch

pytestmark = [pytest.mark.integration, needs_torch]

NAMESPACE = "ml"
JOB = "ddp"
DNS_DELAY_S = 8  # pod 0's record appears this long after both agents started
TRAIN_TIMEOUT_S = 150  # after the record: the fixed render trains in about 20 s here


def _expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion (kubernetes third_party/forked/golang/expansion/expand.go): a defined
    variable's value, ``$$`` a literal ``$``, anything else as written."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m[0] == "$$" else env.get(m[1], m[0]), text)


@pytest.fixture
def pod_network():
    """A network namespace for the job's pods (loopback up); removed afterwards."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("bwrap"):
        pytest.skip("needs root, iproute2's ip and bubblewrap (scripts/install_bwrap.sh)")
    name = f"amlf5{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _start_pod(netns: str, index: int, container: dict, hosts: Path, workdir: Path, log: Path) -> subprocess.Popen:
    env = {var["name"]: var["value"] for var in container.get("env", [])}  # plain values only in this spec
    env["JOB_COMPLETION_INDEX"] = str(index)  # appended by the Job controller
    argv = [_expand(arg, env) for arg in [*container["command"], *container.get("args", [])]]
    hostname = f"{JOB}-{index}"
    pod_env = {"PATH": f"{TRAINING_IMAGE}/bin:/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir),
               "HOSTNAME": hostname, **env}
    sandbox = ["bwrap", "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--bind", str(hosts), "/etc/hosts",
               "--unshare-uts", "--hostname", hostname, "--unshare-pid", "--die-with-parent",
               "--chdir", container.get("workingDir", str(workdir)), "--"]
    with open(log, "wb") as out:
        return subprocess.Popen(["ip", "netns", "exec", netns, *sandbox, *argv], env=pod_env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith('{"')]


def test_f5_indexed_job_pods_train_while_pod_0s_name_does_not_resolve_yet(tmp_path, pod_network):
    spec = TrainingJobSpec(
        framework="pytorch", num_workers=2, image=str(TRAINING_IMAGE), model_dir=str(tmp_path / "model"),
        checkpoint_dir=str(tmp_path / "checkpoints"), working_dir=str(tmp_path), env={"OMP_NUM_THREADS": "1"},
        command=["python", "-m", "airflow_ml_provider.runtime.torch_ddp", "--epochs", "2"])
    job, service = get_backend("indexed-job", api_client=None, namespace=NAMESPACE).manifests(JOB, spec, {})
    template = job["spec"]["template"]["spec"]
    (container,) = template["containers"]
    assert template["subdomain"] == service["metadata"]["name"] == JOB
    ips = {index: f"127.0.10.{index + 1}" for index in range(job["spec"]["completions"])}

    def kubelet_hosts(index: int) -> str:  # kubelet_pods.go managedHostsFileContent: the pod's own lines
        return (f"127.0.0.1\tlocalhost\n{ips[index]}\t{JOB}-{index}.{JOB}.{NAMESPACE}.svc.cluster.local"
                f"\t{JOB}-{index}\n")

    hosts = {index: tmp_path / f"hosts-{index}" for index in ips}
    for index, path in hosts.items():  # cluster DNS already answers for every pod but pod 0
        path.write_text(kubelet_hosts(index) + "".join(f"{ips[peer]}\t{JOB}-{peer}.{JOB}\n" for peer in ips if peer))
    logs = {index: tmp_path / f"pod-{index}.log" for index in ips}
    procs = {index: _start_pod(pod_network, index, container, hosts[index], tmp_path, logs[index]) for index in ips}
    try:
        time.sleep(DNS_DELAY_S)
        assert all(proc.poll() is None for proc in procs.values()), {i: logs[i].read_text()[-2000:] for i in ips}
        for path in hosts.values():  # the record appears: appended in place, so each pod's bind mount sees it
            with open(path, "a") as out:
                out.write(f"{ips[0]}\t{JOB}-0.{JOB}\n")
        codes = {}
        deadline = time.monotonic() + TRAIN_TIMEOUT_S
        for index, proc in procs.items():
            try:
                codes[index] = proc.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                codes[index] = None
        assert codes == {0: 0, 1: 0}, "pods did not train:\n" + "\n".join(
            f"--- pod {i} (exit {codes[i]}):\n{logs[i].read_text()[-3000:]}" for i in ips)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
    checksums = {e["rank"]: e["checksum"] for i in ips for e in _events(logs[i]) if e.get("event") == "weights_checksum"}
    assert sorted(checksums) == [0, 1] and len(set(checksums.values())) == 1, checksums
    assert [e["rank"] for e in _events(logs[0]) if e.get("event") == "weights_checksum"] == [0]  # pod 0 is node 0
    assert (tmp_path / "model" / "model.pt").stat().st_size > 0
