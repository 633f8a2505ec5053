"""Run a rendered pod's container as a local process with what a kubelet gives a pod, and nothing more.

Each pod gets its own network namespace with one address on a shared bridge (what a CNI bridge plugin
does), its own hostname (UTS namespace), a hosts file bind-mounted on /etc/hosts (the kubelet-managed
file, plus the peers' names that cluster DNS would answer for a headless Service), and its volumes
bind-mounted at their mount paths in its own mount namespace (``ip netns exec`` gives a private one).
The container's command, env and workingDir are taken from the manifest as they are. Needs root.

Run as ``python tests/pod_sandbox.py HOSTNAME SRC:DST... -- ARGV`` inside ``ip netns exec``, it is the
container runtime's last step: set the hostname, mount the volumes, exec the container's command.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

CLONE_NEWUTS = 0x04000000
SUBNET = "10.251.0"


def can_run() -> str | None:
    """Why pods cannot be sandboxed here, or None."""
    if os.geteuid() != 0:
        return "needs root (network and mount namespaces)"
    if not shutil.which("ip") or not shutil.which("mount"):
        return "needs iproute2's ip and util-linux's mount"
    return None


def can_ssh() -> str | None:
    """Why the image's sshd and ssh cannot run here (scripts/install_sshd.sh installs them), or None."""
    if not Path("/usr/sbin/sshd").exists() or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        return "needs Debian's openssh-server and openssh-client (scripts/install_sshd.sh)"
    return None


def image_path(image: str) -> str:
    """The training image's PATH (images/training/Dockerfile), with its /opt/venv replaced by the local
    training environment that stands in for the image."""
    return f"{image}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


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
        assert path in (fields or {}), f"env {var['name']}: the pod sandbox resolves only the given fieldRefs"
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


class Cluster:
    """Pods on one bridge; ``close`` removes every namespace, link and mount point it made."""

    def __init__(self, namespace: str):
        self.namespace = namespace
        self.tag = uuid.uuid4().hex[:5]
        self.bridge = f"amlb{self.tag}"
        self.pods: dict[str, tuple[str, str, str]] = {}  # hostname -> (netns, ip, subdomain)
        self.procs: list[subprocess.Popen] = []
        self.made_dirs: list[Path] = []
        self._ip("link", "add", self.bridge, "type", "bridge")
        self._ip("link", "set", self.bridge, "up")

    @staticmethod
    def _ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    def add_pod(self, hostname: str, subdomain: str) -> str:
        """A pod network namespace with eth0 on the bridge, as a CNI bridge plugin makes it; its IP."""
        index = len(self.pods)
        netns, veth, ip = f"amlp{self.tag}{index}", f"amlv{self.tag}{index}", f"{SUBNET}.{index + 2}"
        self._ip("netns", "add", netns)
        self._ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        self._ip("link", "set", veth, "master", self.bridge, "up")
        self._ip("-n", netns, "addr", "add", f"{ip}/24", "dev", "eth0")
        self._ip("-n", netns, "link", "set", "eth0", "up")
        self._ip("-n", netns, "link", "set", "lo", "up")
        self.pods[hostname] = (netns, ip, subdomain)
        return ip

    def hosts_file(self, hostname: str, directory: Path) -> Path:
        """The pod's /etc/hosts: the kubelet's managed file (localhost and the pod's own FQDN and
        hostname: kubernetes pkg/kubelet/kubelet_pods.go, managedHostsFileContent) plus every peer's
        ``<hostname>.<subdomain>[.<ns>.svc[.cluster.local]]``, the names cluster DNS resolves for a
        headless Service's pods (the search path ``<ns>.svc.cluster.local`` makes the short forms work)."""
        lines = ["# Kubernetes-managed hosts file.", "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost"]
        for name, (_, ip, sub) in self.pods.items():
            fqdn = f"{name}.{sub}.{self.namespace}.svc"
            aliases = [f"{fqdn}.cluster.local", fqdn, f"{name}.{sub}"] + ([name] if name == hostname else [])
            lines.append(f"{ip}\t{' '.join(aliases)}")
        path = directory / f"hosts-{hostname}"
        path.write_text("\n".join(lines) + "\n")
        return path

    def mount_point(self, path: str) -> None:
        """Create a volume's mount point that the image lacks (as a container runtime does); removed at close."""
        missing = []
        for parent in [Path(path), *Path(path).parents]:
            if parent.exists():
                break
            missing.append(parent)
        for directory in reversed(missing):
            directory.mkdir()
            self.made_dirs.append(directory)

    def start(self, hostname: str, container: dict, *, image: str, extra_env: dict[str, str],
              mounts: dict[str, Path], workdir: Path, log: Path,
              fields: dict[str, str] | None = None) -> subprocess.Popen:
        """Start ``container`` (from the manifest) in pod ``hostname``: its command and env unmodified
        (``fields`` answers its downward-API references), ``extra_env`` appended as a controller's
        admission step appends it, ``$(VAR)`` in command and args expanded as the kubelet does, volumes
        at their paths."""
        netns = self.pods[hostname][0]
        pod_env = {**container_env(container, fields), **extra_env}
        env = {"PATH": image_path(image), "HOME": "/root", "HOSTNAME": hostname, **pod_env}
        binds = {"/etc/hosts": self.hosts_file(hostname, workdir), **mounts}
        for target in binds:
            self.mount_point(target)
        argv = ["ip", "netns", "exec", netns, sys.executable, str(Path(__file__).resolve()), hostname,
                *(f"{source}:{target}" for target, source in binds.items()), "--",
                *(expand(arg, pod_env) for arg in [*container["command"], *container.get("args", [])])]
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, env=env, cwd=container.get("workingDir", workdir), stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def wait_port(self, hostname: str, port: int, timeout_s: float = 30.0) -> None:
        """Wait until a pod listens on ``port`` (a readiness probe's TCP check, from the pod's network)."""
        netns, ip, _ = self.pods[hostname]
        probe = f"import socket,time\nfor _ in range({int(timeout_s * 10)}):\n" \
                f"  try: socket.create_connection(('{ip}', {port}), 1).close(); break\n" \
                f"  except OSError: time.sleep(0.1)\nelse: raise SystemExit('pod {hostname}: nothing on {port}')"
        subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", probe], check=True)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
        for netns, _, _ in self.pods.values():
            subprocess.run(["ip", "netns", "del", netns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        for directory in reversed(self.made_dirs):
            try:
                directory.rmdir()
            except OSError:
                pass


def image_ssh_dir(root: Path, image: str) -> Path:
    """The training image's /etc/ssh as images/training/Dockerfile makes it: Debian's openssh config,
    fresh host keys (``ssh-keygen -A``), ``StrictModes no`` and ``SetEnv PATH`` for sshd, and a client
    that keeps no known hosts. Bind-mounted on each pod's /etc/ssh, so the host's own is never used."""
    etc = root / "etc" / "ssh"
    shutil.copytree("/etc/ssh", etc, ignore=shutil.ignore_patterns("ssh_host_*"))
    subprocess.run(["ssh-keygen", "-A", "-f", str(root)], check=True, capture_output=True)
    sshd = (etc / "sshd_config").read_text()
    sshd = "\n".join("StrictModes no" if line.lstrip("#").startswith("StrictModes ") else line
                      for line in sshd.splitlines())
    (etc / "sshd_config").write_text(f"{sshd}\nSetEnv PATH={image_path(image)}\n")
    with open(etc / "ssh_config", "a") as client:
        client.write("Host *\n    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n    LogLevel ERROR\n")
    return etc


def ssh_key_dir(directory: Path, key_type: list[str], config: str | None = None) -> Path:
    """A job's SSH Secret as mounted on /root/.ssh (mode 0600): id_rsa, id_rsa.pub, authorized_keys (the
    public key again) and, for Volcano, ``config``."""
    directory.mkdir(parents=True)
    subprocess.run(["ssh-keygen", *key_type, "-m", "PEM", "-N", "", "-q", "-f", str(directory / "id_rsa")],
                   check=True)
    shutil.copy(directory / "id_rsa.pub", directory / "authorized_keys")
    if config is not None:
        (directory / "config").write_text(config)
    for path in directory.iterdir():
        path.chmod(0o600)
    directory.chmod(0o700)
    return directory


def _exec_in_pod(argv: list[str]) -> None:
    """Inside the pod's namespaces: hostname, volume mounts, then the container's command."""
    split = argv.index("--")
    hostname, binds, command = argv[0], argv[1:split], argv[split + 1:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUTS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUTS)")
    socket.sethostname(hostname)
    for bind in binds:
        source, target = bind.split(":", 1)
        subprocess.run(["mount", "--bind", source, target], check=True)
    os.execvpe(command[0], command, os.environ)


if __name__ == "__main__":
    _exec_in_pod(sys.argv[1:])
