"""Issue 39, F11: every rendered pod passes the Pod Security Standard "baseline" by default, and "restricted"
(``kubernetes.pod_security: restricted``) on every backend and framework whose pods need no root; where they do
(the sshd of MPIJob workers and of Volcano's Horovod workers) "restricted" is refused naming the field and why.
Checked against the standards' own field lists (tests/pod_security.py, from the Pod Security admission
controller's control definitions), on the pods as the controllers create them where that differs from the
template: a TrainJob's JobSet (tests/trainer_controller.py)."""

from __future__ import annotations

import pytest
from pod_security import violations
from trainer_controller import jobset_for

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.base import JobSubmissionError
from airflow_ml_provider.jobs.spec import SpecError, TrainingJobSpec

RUNS = [("mpijob", "horovod"), ("mpijob", "generic"), ("volcano", "horovod"), ("volcano", "lightgbm"),
        ("volcano", "pytorch"), ("volcano", "generic"), ("indexed-job", "lightgbm"), ("indexed-job", "pytorch"),
        ("indexed-job", "generic"), ("trainjob", "pytorch")]
NEEDS_ROOT = {("mpijob", "horovod"), ("mpijob", "generic"), ("volcano", "horovod")}
PVC = {"name": "data", "mount_path": "/data", "claim": "datasets"}
ROOT = {"runAsUser": 0, "runAsGroup": 0}


def spec(framework: str, **kubernetes) -> TrainingJobSpec:
    return TrainingJobSpec(framework=framework, command=["python", "-m", "train"], num_workers=2, image="img:1",
                           resources={"gpu": 1}, scheduling={"gang": False},
                           kubernetes={"volumes": [PVC], "secret_env": {"TOKEN": {"secret": "s", "key": "k"}},
                                       **kubernetes})


def pods(kind: str, job: TrainingJobSpec) -> list[dict]:
    """Every pod template of the job, as the pods will be made of it (a TrainJob's: its JobSet's)."""
    obj = get_backend(kind, api_client=None, namespace="ml").manifests("job", job, {})[0]
    if kind == "mpijob":
        return [replica["template"] for replica in obj["spec"]["mpiReplicaSpecs"].values()]
    if kind == "volcano":
        return [task["template"] for task in obj["spec"]["tasks"]]
    if kind == "indexed-job":
        return [obj["spec"]["template"]]
    obj["metadata"]["uid"] = "0"
    (replicated,) = jobset_for(obj)["spec"]["replicatedJobs"]
    return [replicated["template"]["spec"]["template"]]


def test_the_check_follows_the_standards_field_lists():
    """The checker itself, on pods that break one control each (the lists of tests/pod_security.py)."""
    ok = {"spec": {"containers": [{"name": "c", "image": "i"}]}}
    assert violations(ok, "baseline") == []
    assert any("Running as Non-root" in v for v in violations(ok, "restricted"))
    bad = [{"hostNetwork": True}, {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]},
           {"containers": [{"name": "c", "securityContext": {"privileged": True}}]},
           {"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]},
           {"containers": [{"name": "c", "ports": [{"containerPort": 1, "hostPort": 1}]}]},
           {"securityContext": {"seccompProfile": {"type": "Unconfined"}}, "containers": [{"name": "c"}]},
           {"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}, "containers": [{"name": "c"}]}]
    for pod_spec in bad:
        assert violations({"spec": pod_spec}, "baseline"), pod_spec
    restricted = {"spec": {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                               "seccompProfile": {"type": "RuntimeDefault"}},
                           "containers": [{"name": "c", "securityContext": {
                               "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}}
    assert violations(restricted, "restricted") == []
    nfs = {"spec": {**restricted["spec"], "volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}]}}
    assert violations(nfs, "baseline") == [] and violations(nfs, "restricted")


@pytest.mark.parametrize("kind,framework", RUNS)
def test_every_pod_passes_baseline_by_default(kind, framework):
    for pod in pods(kind, spec(framework)):
        assert violations(pod, "baseline") == [], (kind, framework)
        assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


@pytest.mark.parametrize("kind,framework", RUNS)
def test_only_the_sshd_pods_ask_for_root_the_rest_run_as_the_images_user(kind, framework):
    """The training image's USER is not root (images/training/Dockerfile): sshd and its ssh clients need root, so
    those pods ask for uid 0; every other pod names no user and runs as the image's."""
    for pod in pods(kind, spec(framework)):
        context = pod["spec"]["securityContext"]
        if (kind, framework) in NEEDS_ROOT:
            assert {k: context.get(k) for k in ROOT} == ROOT, (kind, framework)
        else:
            assert "runAsUser" not in context and "runAsGroup" not in context, (kind, framework)


@pytest.mark.parametrize("kind,framework", [run for run in RUNS if run not in NEEDS_ROOT])
def test_restricted_pods_pass_restricted_where_the_framework_needs_no_root(kind, framework):
    for pod in pods(kind, spec(framework, pod_security="restricted", run_as_user=2000)):
        assert violations(pod, "restricted") == [], (kind, framework)
        assert pod["spec"]["securityContext"]["runAsUser"] == 2000 == pod["spec"]["securityContext"]["fsGroup"]


@pytest.mark.parametrize("kind,framework", sorted(NEEDS_ROOT))
def test_restricted_is_refused_where_sshd_needs_root(kind, framework):
    backend = get_backend(kind, api_client=None, namespace="ml")
    with pytest.raises(JobSubmissionError, match=f"^kubernetes.pod_security: the {kind} backend cannot run "
                                                 "'restricted' .*sshd, which needs root"):
        backend.render("job", spec(framework, pod_security="restricted"), {})
    assert violations(pods(kind, spec(framework))[-1], "restricted"), "its baseline pods would not pass"


@pytest.mark.parametrize("kind,framework", RUNS)
def test_a_host_path_volume_needs_pod_security_privileged(kind, framework):
    host = {"volumes": [{"name": "scratch", "mount_path": "/scratch", "host_path": "/mnt/scratch"}]}
    backend = get_backend(kind, api_client=None, namespace="ml")
    with pytest.raises(JobSubmissionError, match=r"^kubernetes.volumes\[0\].host_path: the Pod Security Standard "
                                                 "'baseline' forbids hostPath volumes"):
        backend.render("job", spec(framework, **host), {})
    for pod in pods(kind, spec(framework, pod_security="privileged", **host)):
        # privileged: no securityContext, but for the user of the sshd pods (the image's own is not root)
        assert pod["spec"].get("securityContext") == (ROOT if (kind, framework) in NEEDS_ROOT else None)
        assert [v for v in violations(pod, "baseline") if "HostPath" in v]


def test_run_as_user_is_refused_where_nothing_runs_as_it():
    with pytest.raises(JobSubmissionError, match="^kubernetes.run_as_user: .*does not use it"):
        get_backend("indexed-job", api_client=None, namespace="ml").render("job", spec("lightgbm", run_as_user=7), {})
    with pytest.raises(SpecError, match="kubernetes.run_as_user"):
        spec("lightgbm", pod_security="restricted", run_as_user=0)
    with pytest.raises(SpecError, match="kubernetes.pod_security"):
        spec("lightgbm", pod_security="strict")
