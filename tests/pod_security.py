"""The Pod Security Standards ("baseline", "restricted") as a check of one pod (its metadata and spec), for the
tests: what a namespace labelled ``pod-security.kubernetes.io/enforce=<level>`` would refuse.

Written from the published field lists, control by control: the Pod Security Standards page
(https://kubernetes.io/docs/concepts/security/pod-security-standards/) as the Pod Security admission
controller carries it, each control's "Restricted Fields" and "Allowed Values" in the comment heading its
check (kubernetes/pod-security-admission v0.36.2, 39b45cd167e1bd665aaeefc6e1acc1cc753259f2, policy/check_*.go;
the file and lines are named at each check below). Version-dependent allowances are taken at their newest
(SELinux's container_engine_t from 1.31, the sysctls of 1.29+). A pod in a user namespace (``hostUsers: false``)
is not treated specially: no rendered pod asks for one.
"""

from __future__ import annotations

LEVELS = ("baseline", "restricted")

# policy/check_capabilities_baseline.go:35-37
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
# policy/check_seLinuxOptions.go:37-42 (and container_engine_t from 1.31, :79)
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
# policy/check_sysctls.go:39-51
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}
# policy/check_restrictedVolumes.go:29-39: the only inline volume sources "restricted" allows
RESTRICTED_VOLUME_SOURCES = {"configMap", "downwardAPI", "emptyDir", "projected", "secret", "csi",
                             "persistentVolumeClaim", "ephemeral", "image"}
_PROFILES = {"RuntimeDefault", "Localhost"}
_PROBE_HOSTS = ("livenessProbe", "readinessProbe", "startupProbe")


def _containers(spec: dict) -> list[tuple[str, dict]]:
    return [(f"{kind}[{c.get('name', i)}]", c) for kind in ("containers", "initContainers", "ephemeralContainers")
            for i, c in enumerate(spec.get(kind) or [])]


def _ctx(obj: dict) -> dict:
    return obj.get("securityContext") or {}


def violations(pod: dict, level: str) -> list[str]:
    """What of ``pod`` (``{"metadata": ..., "spec": ...}``, as a pod template is) the Pod Security Standard
    ``level`` forbids: one line per violated control and field; empty when the pod passes."""
    if level not in LEVELS:
        raise ValueError(f"level: {level!r} is not one of {LEVELS}")
    found = _baseline(pod)
    if level == "restricted":
        found += _restricted(pod)
    return found


def _baseline(pod: dict) -> list[str]:
    spec, annotations = pod.get("spec") or {}, (pod.get("metadata") or {}).get("annotations") or {}
    found, containers = [], _containers(spec)
    # HostProcess, policy/check_windowsHostProcess.go:28-38
    for where, obj in [("spec", spec), *containers]:
        if (_ctx(obj).get("windowsOptions") or {}).get("hostProcess"):
            found.append(f"HostProcess: {where}.securityContext.windowsOptions.hostProcess")
    # Host Namespaces, policy/check_hostNamespaces.go:27-37
    found += [f"Host Namespaces: spec.{field}" for field in ("hostNetwork", "hostPID", "hostIPC") if spec.get(field)]
    for where, c in containers:
        ctx = _ctx(c)
        # Privileged Containers, policy/check_privileged.go:27-35
        if ctx.get("privileged"):
            found.append(f"Privileged Containers: {where}.securityContext.privileged")
        # Capabilities, policy/check_capabilities_baseline.go:28-38
        if extra := set((ctx.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES:
            found.append(f"Capabilities: {where}.securityContext.capabilities.add {sorted(extra)}")
        # Host Ports, policy/check_hostPorts.go:30-39
        if any(port.get("hostPort") for port in c.get("ports") or []):
            found.append(f"Host Ports: {where}.ports[*].hostPort")
        # /proc Mount Type, policy/check_procMount_baseline.go:28-38
        if ctx.get("procMount") not in (None, "Default"):
            found.append(f"/proc Mount Type: {where}.securityContext.procMount")
        # Host probes and lifecycle hooks, policy/check_hostProbesAndhostLifecycle.go:28-55
        handlers = [c.get(probe) or {} for probe in _PROBE_HOSTS]
        handlers += [(c.get("lifecycle") or {}).get(hook) or {} for hook in ("postStart", "preStop")]
        if any((handler.get(kind) or {}).get("host") for handler in handlers for kind in ("httpGet", "tcpSocket")):
            found.append(f"Host Probes / Lifecycle Hooks: {where} names a host")
    # HostPath Volumes, policy/check_hostPathVolumes.go:27-35
    found += [f"HostPath Volumes: spec.volumes[{v.get('name')}].hostPath" for v in spec.get("volumes") or []
              if "hostPath" in v]
    # AppArmor, policy/check_appArmorProfile.go:30-47
    for key, value in annotations.items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and value and \
                value != "runtime/default" and not value.startswith("localhost/"):
            found.append(f"AppArmor: metadata.annotations[{key!r}]")
    for where, obj in [("spec", spec), *containers]:
        profile = _ctx(obj).get("appArmorProfile") or {}
        if profile and profile.get("type") not in _PROFILES:
            found.append(f"AppArmor: {where}.securityContext.appArmorProfile.type")
        # SELinux, policy/check_seLinuxOptions.go:29-52
        selinux = _ctx(obj).get("seLinuxOptions") or {}
        if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            found.append(f"SELinux: {where}.securityContext.seLinuxOptions")
        # Seccomp, policy/check_seccompProfile_baseline.go:29-46
        seccomp = _ctx(obj).get("seccompProfile") or {}
        if seccomp and seccomp.get("type") not in _PROFILES:
            found.append(f"Seccomp: {where}.securityContext.seccompProfile.type")
    # Sysctls, policy/check_sysctls.go:28-53
    found += [f"Sysctls: spec.securityContext.sysctls[{s.get('name')}]" for s in _ctx(spec).get("sysctls") or []
              if s.get("name") not in SAFE_SYSCTLS]
    return found


def _restricted(pod: dict) -> list[str]:
    spec = pod.get("spec") or {}
    found, containers, pod_ctx = [], _containers(spec), _ctx(spec)
    # Volume Types, policy/check_restrictedVolumes.go:28-66
    for volume in spec.get("volumes") or []:
        if not set(volume) - {"name"} <= RESTRICTED_VOLUME_SOURCES:
            found.append(f"Volume Types: spec.volumes[{volume.get('name')}] {sorted(set(volume) - {'name'})}")
    # Running as Non-root, policy/check_runAsNonRoot.go:28-42: true at pod level (containers may leave it
    # undefined, not false), else true in every container
    for where, c in containers:
        ctx = _ctx(c)
        # Privilege Escalation, policy/check_allowPrivilegeEscalation.go:27-36
        if ctx.get("allowPrivilegeEscalation") is not False:
            found.append(f"Privilege Escalation: {where}.securityContext.allowPrivilegeEscalation must be false")
        if ctx.get("runAsNonRoot") is False or (ctx.get("runAsNonRoot") is not True and pod_ctx.get("runAsNonRoot") is not True):
            found.append(f"Running as Non-root: {where}.securityContext.runAsNonRoot")
        # Running as Non-root user, policy/check_runAsUser.go:28-43
        if ctx.get("runAsUser") == 0:
            found.append(f"Running as Non-root user: {where}.securityContext.runAsUser")
        # Seccomp, policy/check_seccompProfile_restricted.go:29-42: pod level, or every container
        if (ctx.get("seccompProfile") or {}).get("type") not in _PROFILES and \
                (pod_ctx.get("seccompProfile") or {}).get("type") not in _PROFILES:
            found.append(f"Seccomp: {where}.securityContext.seccompProfile.type (nor the pod's)")
        # Capabilities, policy/check_capabilities_restricted.go:34-51
        capabilities = ctx.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"Capabilities: {where}.securityContext.capabilities.drop must include ALL")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"Capabilities: {where}.securityContext.capabilities.add beyond NET_BIND_SERVICE")
    if pod_ctx.get("runAsUser") == 0:
        found.append("Running as Non-root user: spec.securityContext.runAsUser")
    return found
