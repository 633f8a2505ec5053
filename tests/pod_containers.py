"""Run a controller's pods as containers of the built training image (podman), with what a kubelet gives a pod.

A ``PodNetwork`` is one ``podman network create`` network (netavark's bridge, aardvark-dns answering for every
container on it): a pod is one container, named after the pod, with

- its ``spec.hostname`` as the container's hostname and ``<hostname>.<subdomain>.<ns>.svc.cluster.local`` as a DNS
  name on the network: what cluster DNS answers for a pod under a headless Service (the Service is the subdomain);
  the kubelet's DNS settings for dnsPolicy ClusterFirst, ``search <ns>.svc.cluster.local svc.cluster.local
  cluster.local`` and ``ndots:5`` (kubernetes pkg/kubelet/network/dns/dns.go, ``generateSearchesForDNSClusterFirst``,
  ``defaultDNSOptions``), plus the pod's ``dnsConfig.searches``, so that the short forms resolve as they do there;
- the container's env as rendered (the downward API's ``fieldRef`` values from ``fields``), then what the controller
  appends, and ``$(VAR)`` in command and args expanded as the kubelet does (``expand``);
- the pod's user: its securityContext's runAsUser/runAsGroup, else the image's USER; allowPrivilegeEscalation false
  as ``no-new-privileges``, a capabilities drop list as ``--cap-drop``;
- volumes: a persistentVolumeClaim from ``claims`` (claim name -> host folder), a configMap volume from
  ``config_maps`` (a folder of its keys: ``config_map_folder``), the controller's ConfigMaps and Secrets as folders
  the test writes with the items' modes, each at its mount path;
- restartPolicy: Never as ``--restart no``, OnFailure as ``--restart on-failure``, Always as ``--restart always``.

Needs root (rootful podman) and the image of ``make image`` (tests/training_image.py).
"""

from __future__ import annotations

import json
import shlex
import time
import uuid
from pathlib import Path

from training_image import RUNTIME, podman

RESTART = {"Never": "no", "OnFailure": "on-failure", "Always": "always"}
NAMESPACE = "ml"  # of the image tests' jobs
JOB_TIMEOUT_S = 420  # how long an image test waits for its job to end
CLAIM = {"name": "work", "mount_path": "/work", "claim": "work"}  # the jobs' volume: the ``claims`` fixture's folder


def container_env(container: dict, fields: dict[str, str] | None = None) -> dict[str, str]:
    """The container's env as the manifest gives it: plain values, and the downward API's ``fieldRef``
    values from ``fields`` (fieldPath -> the pod's value, e.g. a Job controller's completion-index
    annotation), as the kubelet resolves them. These tests put no secrets in: a secret reference fails."""
    env = {}
    for var in container.get("env", []):
        source = var.get("valueFrom")
        if source is None:
            env[var["name"]] = var["value"]
            continue
        path = (source.get("fieldRef") or {}).get("fieldPath")
        assert path in (fields or {}), f"env {var['name']}: only the given fieldRefs are resolved here"
        env[var["name"]] = fields[path]
    return env


def expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion of a container's command and args (kubernetes
    third_party/forked/golang/expansion/expand.go ``Expand``, called by pkg/kubelet/container/helpers.go
    ``ExpandContainerCommandAndArgs``): a defined variable's value, ``$$`` for a literal ``$``, anything
    else kept as written."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            if text[i + 1] == "$":
                out.append("$")
                i += 2
                continue
            if text[i + 1] == "(" and (end := text.find(")", i + 2)) != -1 and text[i + 2:end] in env:
                out.append(env[text[i + 2:end]])
                i = end + 1
                continue
        out.append(text[i])
        i += 1
    return "".join(out)


def kubelet_searches(namespace: str) -> list[str]:
    """dnsPolicy ClusterFirst's search path (pkg/kubelet/network/dns/dns.go generateSearchesForDNSClusterFirst)."""
    return [f"{namespace}.svc.cluster.local", "svc.cluster.local", "cluster.local"]


class PodNetwork:
    """Pods of one namespace on one podman network; ``close`` removes every container and the network."""

    def __init__(self, image: str, namespace: str):
        self.image, self.namespace = image, namespace
        self.network = f"aml-{uuid.uuid4().hex[:8]}"
        self.pods: dict[str, str] = {}  # hostname -> container name
        self.closed = False
        podman("network", "create", self.network)

    def start(self, hostname: str, subdomain: str, pod: dict, container: dict, *,
              extra_env: dict[str, str] | None = None, mounts: dict[str, Path] | None = None,
              claims: dict[str, Path] | None = None, fields: dict[str, str] | None = None,
              hosts: dict[str, str] | None = None, config_maps: dict[str, Path] | None = None) -> str:
        """Start ``container`` of pod spec ``pod`` as pod ``hostname`` under Service ``subdomain``; ``mounts``
        (mount path -> host folder) are the controller's ConfigMap and Secret volumes, ``claims`` the PVCs,
        ``config_maps`` (name -> host folder, ``config_map_folder``) the ConfigMaps the pod's own volumes name,
        ``hosts`` (name -> address) names outside the network (tests/pod_api.py: the API server's)."""
        assert not self.closed, f"pod {hostname}: the network is gone"
        name = f"{self.network}-{hostname}"
        env = {**container_env(container, fields), **(extra_env or {})}
        fqdn = f"{hostname}.{subdomain}.{self.namespace}.svc.cluster.local"
        searches = [*kubelet_searches(self.namespace), *((pod.get("dnsConfig") or {}).get("searches") or [])]
        options = ["run", "--detach", "--name", name, "--runtime", RUNTIME, "--network", self.network,
                   "--network-alias", fqdn, "--hostname", hostname, "--dns-option", "ndots:5",
                   "--restart", RESTART[pod.get("restartPolicy", "Always")]]
        for search in searches:
            options += ["--dns-search", search]
        for host, address in (hosts or {}).items():
            options += ["--add-host", f"{host}:{address}"]
        context = {**(pod.get("securityContext") or {}), **(container.get("securityContext") or {})}
        if "runAsUser" in context:
            options += ["--user", f"{context['runAsUser']}:{context.get('runAsGroup', context['runAsUser'])}"]
        if context.get("allowPrivilegeEscalation") is False:
            options += ["--security-opt", "no-new-privileges"]
        for capability in (context.get("capabilities") or {}).get("drop") or []:
            options += ["--cap-drop", capability]
        volumes = {volume["name"]: volume for volume in pod.get("volumes") or []}
        for mount in container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            if "configMap" in volume:  # the kubelet's configMap volume: the data's keys as files, read-only
                options += ["-v", f"{(config_maps or {})[volume['configMap']['name']]}:{mount['mountPath']}:ro"]
                continue
            claim = volume["persistentVolumeClaim"]["claimName"]
            options += ["-v", f"{(claims or {})[claim]}:{mount['mountPath']}{':ro' if mount.get('readOnly') else ''}"]
        for target, source in (mounts or {}).items():
            options += ["-v", f"{source}:{target}"]
        for key, value in env.items():
            options += ["--env", f"{key}={value}"]
        if container.get("workingDir"):
            options += ["--workdir", container["workingDir"]]
        argv = [expand(arg, env) for arg in [*container.get("command", []), *container.get("args", [])]]
        podman(*options, self.image, *argv)
        self.pods[hostname] = name
        return name

    def listening(self, hostname: str, port: int) -> bool:
        """Whether the pod accepts a connection on ``port`` now: one readiness probe's TCP check."""
        probe = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), 1).close()"
        return podman("exec", self.pods[hostname], "python", "-c", probe, check=False, timeout=30).returncode == 0

    def wait_port(self, hostname: str, port: int, timeout_s: float = 60) -> None:
        """Until the pod listens on ``port`` (a readiness probe's TCP check)."""
        probe = (f"import socket, time\nfor _ in range({int(timeout_s * 5)}):\n"
                 f"    try: socket.create_connection(('127.0.0.1', {port}), 1).close(); break\n"
                 f"    except OSError: time.sleep(0.2)\nelse: raise SystemExit('nothing on port {port}')")
        done = podman("exec", self.pods[hostname], "python", "-c", probe, check=False, timeout=timeout_s + 30)
        assert done.returncode == 0, f"pod {hostname}: {done.stdout}{done.stderr}\n{self.logs(hostname)[-3000:]}"

    def state(self, hostname: str) -> dict:
        return json.loads(podman("inspect", "--format", "{{json .State}}", self.pods[hostname]).stdout)

    def wait(self, hostname: str, timeout_s: float) -> int | None:
        """The pod's container's exit code once it stopped for good (no restart pending), None at the timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.state(hostname)
            if state["Status"] in ("exited", "stopped") and not state.get("Restarting"):
                time.sleep(1)  # a restart policy's restart comes from podman's cleanup process, right after
                again = self.state(hostname)
                if again["Status"] in ("exited", "stopped") and again.get("StartedAt") == state.get("StartedAt"):
                    return again["ExitCode"]
            time.sleep(1)
        return None

    def rename_stopped(self, hostname: str, keep_as: str) -> None:
        """Keep a stopped pod's container (its logs) under ``keep_as``, freeing the name for the next pod."""
        kept = f"{self.network}-{keep_as}"
        podman("rename", self.pods.pop(hostname), kept)
        self.pods[keep_as] = kept

    def restarts(self, hostname: str) -> int:
        out = podman("inspect", "--format", "{{.RestartCount}}", self.pods[hostname]).stdout.strip()
        return int(out or 0)

    def logs(self, hostname: str) -> str:
        done = podman("logs", self.pods[hostname], check=False)
        return done.stdout + done.stderr

    def kill(self, hostname: str) -> None:
        podman("kill", self.pods[hostname], check=False)

    def close(self) -> None:
        """Every container on the network (also one a controller thread started late), then the network."""
        self.closed = True
        listed = podman("ps", "--all", "--filter", f"network={self.network}", "--format", "{{.Names}}", check=False)
        for name in {*self.pods.values(), *listed.stdout.split()}:
            podman("rm", "--force", "--time", "0", name, check=False)
        podman("network", "rm", "--force", self.network, check=False)

    def describe(self) -> str:
        return "; ".join(f"{h}: {shlex.quote(n)}" for h, n in self.pods.items())


def config_map_folder(config_map: dict, folder: Path) -> Path:
    """A ConfigMap's data as the kubelet's configMap volume shows it: a file per key (mode 0644, its default
    ``defaultMode``), in ``folder``, readable by every pod's user."""
    folder.mkdir(parents=True)
    folder.chmod(0o755)
    for key, value in (config_map.get("data") or {}).items():
        (folder / key).write_text(value)
        (folder / key).chmod(0o644)
    return folder


def json_events(text: str) -> list[dict]:
    """A pod log's JSON lines from the trainer, without the ``[<rank>]<stdout>:`` horovodrun puts before a rank's."""
    lines = (line.partition("<stdout>:")[2] if line.startswith("[") else line for line in text.splitlines())
    return [json.loads(line) for line in lines if line.startswith('{"')]
