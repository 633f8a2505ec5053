"""Pod templates shared by the Kubernetes backends: one TrainingJobSpec, one way to render a worker."""

from __future__ import annotations

from airflow_ml_provider.artifact_layout import TENSORBOARD_ENV, tensorboard_dir
from airflow_ml_provider.jobs.spec import KubernetesOptions, TrainingJobSpec

GPU_RESOURCE = "nvidia.com/gpu"
ROLE_LABEL = "ml.airflow.apache.org/role"


def user_argv(spec: TrainingJobSpec) -> list[str]:
    """The user's command as the trailing arguments of ``horovodrun``. It takes no ``--``
    to end its options (horovodrun's argparse REMAINDER keeps the ``--`` and would run it as the
    program), so a program that looks like an option (``-H evil:8``) is refused instead."""
    if spec.command[0].startswith("-"):
        raise ValueError(f"command: the program {spec.command[0]!r} starts with '-', which the launcher "
                         "would take as one of its own options")
    return list(spec.command)


def refuse_unused(spec: TrainingJobSpec, backend: str, *fields: str) -> None:
    """ValueError naming the first of ``fields`` (KubernetesOptions the backend has no use for) that is
    set to anything but its default: an option that would silently do nothing is refused instead."""
    for name in fields:
        value = getattr(spec.kubernetes, name)
        if value != KubernetesOptions.model_fields[name].default:
            raise ValueError(f"kubernetes.{name}: the {backend} backend does not use it (got {value!r})")


def check_pod_security(spec: TrainingJobSpec, backend: str, needs_root: str | None = None) -> None:
    """ValueError naming the field when the job's pods could not pass the Pod Security Standard it asks for
    (``kubernetes.pod_security``): a hostPath volume outside "privileged" (PSS baseline: "HostPath volumes
    must be forbidden"), "restricted" where ``needs_root`` says why a pod of this backend runs as root, and
    ``run_as_user`` where nothing runs as it."""
    options = spec.kubernetes
    level = options.pod_security
    if level != "privileged":
        for index, volume in enumerate(options.volumes):
            if volume.host_path:
                raise ValueError(f"kubernetes.volumes[{index}].host_path: the Pod Security Standard {level!r} forbids "
                                 "hostPath volumes; mount a PersistentVolumeClaim, or set kubernetes.pod_security "
                                 "to 'privileged'")
    if level == "restricted" and needs_root:
        raise ValueError(f"kubernetes.pod_security: the {backend} backend cannot run 'restricted' (non-root) pods: "
                         f"{needs_root}; use 'baseline', or a backend whose pods run as non-root (indexed-job, "
                         "trainjob, volcano without Horovod)")
    if level != "restricted":
        refuse_unused(spec, f"{backend} (pod_security {level!r})", "run_as_user")


# The user a pod that needs root runs as. The training image's own user is not root (images/training/Dockerfile:
# USER 1000, kubernetes.run_as_user's default), so a pod whose sshd needs root says so (PSS baseline allows it).
ROOT = {"runAsUser": 0, "runAsGroup": 0}


def pod_security_context(spec: TrainingJobSpec, as_root: bool = False) -> dict | None:
    """The pod's securityContext for ``kubernetes.pod_security``. Both levels set seccomp RuntimeDefault
    (PSS baseline allows RuntimeDefault/Localhost/undefined, restricted requires one of the first two);
    "restricted" also runs as ``run_as_user`` (non-zero, runAsNonRoot true, non-root groups). ``as_root`` (the
    pods that run sshd: never "restricted", check_pod_security refuses it) runs as root on every level: the
    image's own user is not."""
    options = spec.kubernetes
    if options.pod_security == "privileged":
        return dict(ROOT) if as_root else None
    context: dict = {"seccompProfile": {"type": "RuntimeDefault"}, **(ROOT if as_root else {})}
    if options.pod_security == "restricted":
        uid = options.run_as_user
        context.update(runAsNonRoot=True, runAsUser=uid, runAsGroup=uid, fsGroup=uid)
    return context


def container_security_context(spec: TrainingJobSpec) -> dict | None:
    """A container's securityContext for ``kubernetes.pod_security``: no privilege escalation on both levels
    (root stays root: sshd and horovodrun need no setuid program); "restricted" drops every capability (its
    containers add none, PSS restricted allows only NET_BIND_SERVICE)."""
    level = spec.kubernetes.pod_security
    if level == "privileged":
        return None
    context: dict = {"allowPrivilegeEscalation": False}
    if level == "restricted":
        context.update(capabilities={"drop": ["ALL"]}, runAsNonRoot=True)
    return context


def deadline_s(spec: TrainingJobSpec) -> int | None:
    """The job's wall-clock limit (activeDeadlineSeconds): the tighter of timeout_s and the Kubernetes option."""
    limits = [s for s in (spec.timeout_s, spec.kubernetes.active_deadline_seconds) if s]
    return min(limits) if limits else None


def job_env(spec: TrainingJobSpec, extra: dict[str, str] | None = None) -> list[dict]:
    """Plain variables as values; secrets only as references, so no value is ever in the manifest."""
    plain = {
        "AIRFLOW_ML_NUM_WORKERS": str(spec.num_workers),
        "PYTHONUNBUFFERED": "1",
        **({"AIRFLOW_ML_MODEL_DIR": spec.model_dir} if spec.model_dir else {}),
        **({"AIRFLOW_ML_CHECKPOINT_DIR": spec.checkpoint_dir,
            TENSORBOARD_ENV: tensorboard_dir(spec.checkpoint_dir)} if spec.checkpoint_dir else {}),
        **(extra or {}),
        **spec.env,
    }
    env = [{"name": name, "value": value} for name, value in plain.items()]
    env += [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.secret, "key": ref.key}}}
        for name, ref in spec.kubernetes.secret_env.items()
    ]
    return env


def container(spec: TrainingJobSpec, name: str, command: list[str], *, with_accelerators: bool = True,
              env: dict[str, str] | None = None, ports: list[int] = ()) -> dict:
    requests, limits = {}, {}
    if spec.resources.cpu is not None:
        requests["cpu"] = limits["cpu"] = str(spec.resources.cpu)
    if spec.resources.memory is not None:
        requests["memory"] = limits["memory"] = spec.resources.memory
    if with_accelerators and spec.resources.gpu:
        limits[GPU_RESOURCE] = str(spec.resources.gpu)  # extended resources: limits only
    rendered = {
        "name": name,
        "image": spec.image,
        "command": list(command),
        "env": job_env(spec, env),
        "resources": {k: v for k, v in (("requests", requests), ("limits", limits)) if v},
        "volumeMounts": [
            {"name": v.name, "mountPath": v.mount_path, "readOnly": v.read_only} for v in spec.kubernetes.volumes
        ],
    }
    if security := container_security_context(spec):
        rendered["securityContext"] = security
    if spec.working_dir:
        rendered["workingDir"] = spec.working_dir
    if ports:
        rendered["ports"] = [{"containerPort": port} for port in ports]
    return rendered


SSH_PORT = 22


def sshd_container(spec: TrainingJobSpec) -> dict:
    """A Horovod worker pod's container: sshd, which the launcher's horovodrun starts the ranks through. Ready only
    once sshd listens (a TCP probe): a pod without a probe is Ready when its container starts, and the MPI
    operator's WaitForWorkersReady then created the launcher before sshd accepted its ssh."""
    rendered = container(spec, "worker", ["/usr/sbin/sshd", "-De"])
    rendered["readinessProbe"] = {"tcpSocket": {"port": SSH_PORT}, "periodSeconds": 2}
    return rendered


def pod_template(spec: TrainingJobSpec, labels: dict[str, str], role: str, containers: list[dict], *,
                 restart_policy: str | None = "Never", with_accelerators: bool = True, as_root: bool = False,
                 **pod_fields) -> dict:
    """The pod template of one role. ``restart_policy`` None leaves it out (where the controller sets it
    from a field of its own: an MPIJob's replica spec, a training runtime's template); ``as_root``: see
    pod_security_context."""
    options = spec.kubernetes
    node_selector = dict(options.node_selector)
    if with_accelerators and spec.resources.gpu_type:
        node_selector[options.gpu_product_label] = spec.resources.gpu_type
    pod = {
        **({"restartPolicy": restart_policy} if restart_policy else {}),
        "containers": containers,
        **pod_fields,
    }
    if security := pod_security_context(spec, as_root):
        pod["securityContext"] = security
    if node_selector:
        pod["nodeSelector"] = node_selector
    if options.tolerations:
        pod["tolerations"] = [t.model_dump(exclude_none=True, by_alias=True) for t in options.tolerations]
    if options.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": name} for name in options.image_pull_secrets]
    if options.service_account:
        pod["serviceAccountName"] = options.service_account
    if spec.scheduling.priority_class:
        pod["priorityClassName"] = spec.scheduling.priority_class
    if options.volumes:
        pod["volumes"] = [
            {"name": v.name, "persistentVolumeClaim": {"claimName": v.claim, "readOnly": v.read_only}}
            if v.claim else {"name": v.name, "hostPath": {"path": v.host_path}}
            for v in options.volumes
        ]
    return {"metadata": {"labels": {**labels, ROLE_LABEL: role}}, "spec": pod}


def metadata(name: str, namespace: str, labels: dict[str, str]) -> dict:
    return {"name": name, "namespace": namespace, "labels": dict(labels)}
