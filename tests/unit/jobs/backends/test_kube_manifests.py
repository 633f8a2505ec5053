"""What the Kubernetes backends render from a spec, without a cluster: launcher argv, deadlines, gang
sizes, GPU selectors, and the options a backend cannot honour (refused naming the field). The real
API server's schemas accept these manifests: tests/integration/kubernetes/test_backends.py."""

from __future__ import annotations

import logging

import pytest

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.base import JobSubmissionError
from airflow_ml_provider.jobs.backends.kubernetes import indexed_job
from airflow_ml_provider.jobs.spec import SpecError, TrainingJobSpec

HOROVOD = {"framework": "horovod", "command": ["python", "train.py"], "num_workers": 4, "image": "img:1"}


def backend(kind: str, **options):
    return get_backend(kind, api_client=None, namespace="ml", **options)


def manifest(kind: str, **spec) -> dict:
    return backend(kind).manifests("job", TrainingJobSpec(**{**HOROVOD, **spec}), {})[0]


def launcher_command(kind: str, **spec) -> list[str]:
    obj = manifest(kind, **spec)
    template = (obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"] if kind == "mpijob"
                else obj["spec"]["tasks"][0]["template"])
    return template["spec"]["containers"][0]["command"]


@pytest.mark.parametrize("kind", ["mpijob", "volcano"])
@pytest.mark.parametrize("program", ["-H", "--start-timeout", "-np"])
def test_a_program_that_looks_like_a_launcher_option_is_refused(kind, program):
    """Issue 12, item 5: ``--start-timeout 1`` and ``-H evil:8`` were taken as horovodrun's own options.
    horovodrun keeps a ``--`` in the command it runs (argparse REMAINDER), so it cannot be the guard."""
    spec = TrainingJobSpec(**{**HOROVOD, "command": [program, "evil:8", "python", "train.py"]})
    with pytest.raises(JobSubmissionError, match=rf"command: the program '{program}' starts with '-'"):
        backend(kind).render("job", spec, {})


@pytest.mark.parametrize("kind", ["mpijob", "volcano"])
def test_the_users_argv_follows_the_launchers_options_unchanged(kind):
    command = launcher_command(kind, command=["python", "train.py", "-H", "--lr", "0.1"])
    if kind == "volcano":  # the master's gate first: it waits for the workers' sshd, then runs the rest as it is
        assert command[:3] == ["python", "-m", "airflow_ml_provider.runtime.ssh_gate"] and command[4] == "--"
        command = command[5:]
    assert command[0] == "horovodrun" and command[-5:] == ["python", "train.py", "-H", "--lr", "0.1"]
    assert command[command.index("--start-timeout") + 1] == "120"


def test_an_elastic_volcano_master_starts_at_once_and_every_sshd_worker_is_ready_only_once_it_listens():
    elastic = manifest("volcano", min_workers=2, max_workers=6)
    assert elastic["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["command"][0] == "horovodrun"
    for kind in ("mpijob", "volcano"):
        obj = manifest(kind)
        template = (obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"] if kind == "mpijob"
                    else obj["spec"]["tasks"][1]["template"])
        worker = template["spec"]["containers"][0]
        assert worker["command"] == ["/usr/sbin/sshd", "-De"]
        assert worker["readinessProbe"]["tcpSocket"] == {"port": 22}, kind


@pytest.mark.parametrize("working_dir", ["relative/dir", "/data/my dir", "/data;touch /tmp/x", "/a$(id)", "/a`id`",
                                         "/a\n", "/a'b"])
def test_a_working_dir_the_ssh_launcher_would_run_through_a_shell_is_refused(working_dir):
    """Horovod's ssh launcher runs ``cd {pwd}`` unquoted on every worker."""
    with pytest.raises(SpecError, match="TrainingJobSpec.working_dir"):
        TrainingJobSpec(**HOROVOD, working_dir=working_dir)
    assert TrainingJobSpec(**HOROVOD, working_dir="/work/run-1_a.b").working_dir == "/work/run-1_a.b"


def test_an_elastic_mpijob_gangs_the_launcher_and_the_fewest_workers():
    obj = manifest("mpijob", min_workers=2, max_workers=6)
    assert obj["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 3
    assert manifest("mpijob")["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 5
    assert manifest("mpijob", scheduling={"gang": False})["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 1


@pytest.mark.parametrize("kind", ["mpijob", "volcano"])
def test_elastic_bounds_need_horovod(kind):
    spec = TrainingJobSpec(**{**HOROVOD, "framework": "generic", "min_workers": 2})
    with pytest.raises(JobSubmissionError, match="min_workers/max_workers"):
        backend(kind).render("job", spec, {})


def test_timeout_becomes_each_backends_deadline():
    assert manifest("mpijob", timeout_s=600)["spec"]["runPolicy"]["activeDeadlineSeconds"] == 600
    lightgbm = {"framework": "lightgbm", "scheduling": {"gang": False}, "timeout_s": 600,
                "kubernetes": {"active_deadline_seconds": 900}}
    assert manifest("indexed-job", **lightgbm)["spec"]["activeDeadlineSeconds"] == 600
    volcano = manifest("volcano", timeout_s=600)["spec"]  # no job-level field in the Job CRD: every pod's
    assert {task["template"]["spec"]["activeDeadlineSeconds"] for task in volcano["tasks"]} == {600}
    assert "activeDeadlineSeconds" not in manifest("mpijob")["spec"]["runPolicy"]


def test_the_gpu_model_selects_nodes_by_the_gpu_feature_discovery_label_by_default():
    gpu = {"gpu": 1, "gpu_type": "Tesla-T4"}
    worker = manifest("mpijob", resources=gpu)["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["nodeSelector"] == {"nvidia.com/gpu.product": "Tesla-T4"}
    gke = manifest("mpijob", resources={"gpu": 1, "gpu_type": "nvidia-tesla-t4"},
                   kubernetes={"gpu_product_label": "cloud.google.com/gke-accelerator"})
    assert gke["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    with pytest.raises(SpecError, match="gpu_product_label"):
        TrainingJobSpec(**HOROVOD, kubernetes={"gpu_product_label": "not a label"})


LIGHTGBM = {**HOROVOD, "framework": "lightgbm"}


def test_an_indexed_job_refuses_a_queue_and_elastic_bounds_naming_the_field():
    with pytest.raises(JobSubmissionError, match="^scheduling.queue: indexed-job has no queues"):
        backend("indexed-job").render("job", TrainingJobSpec(**LIGHTGBM, scheduling={"queue": "research"}), {})
    with pytest.raises(JobSubmissionError, match="^min_workers/max_workers: indexed-job"):
        backend("indexed-job").render("job", TrainingJobSpec(**LIGHTGBM, min_workers=2), {})


def test_an_indexed_job_honours_the_priority_class_and_says_once_that_gang_is_a_no_op(caplog, monkeypatch):
    monkeypatch.setattr(indexed_job, "_told_no_gang", False)
    jobs = backend("indexed-job")
    with caplog.at_level(logging.WARNING, logger=indexed_job.__name__):
        for scheduling in ({"priority_class": "high"}, {"priority_class": "high", "gang": True}, {}):
            obj = jobs.manifests("job", TrainingJobSpec(**LIGHTGBM, scheduling=scheduling), {})[0]
            assert obj["spec"]["template"]["spec"].get("priorityClassName") == scheduling.get("priority_class")
    assert [r.getMessage() for r in caplog.records] == [
        "scheduling.gang: indexed-job has no gang scheduler; its workers start as they are placed "
        "(use volcano or mpijob to place them as a gang)"]


def test_job_names_and_namespaces_must_be_dns_labels_before_anything_is_rendered():
    spec = TrainingJobSpec(**HOROVOD)
    for name in ("../x", "Job", "a" * 64, "a,b=c", ""):
        with pytest.raises(JobSubmissionError, match="job_name: .* is not a DNS-1123 label"):
            backend("mpijob").render(name, spec, {})
    with pytest.raises(ValueError, match="namespace: 'ml/../kube-system' is not a DNS-1123 label"):
        get_backend("mpijob", api_client=None, namespace="ml/../kube-system")


def test_the_job_name_label_is_always_set_for_the_watch_and_the_log_reader():
    obj = backend("mpijob").render("job", TrainingJobSpec(**HOROVOD), {"team": "ml"})
    assert "ml.airflow.apache.org/job-name: job" in obj and "team: ml" in obj


@pytest.mark.parametrize("kind,framework,option", [
    ("mpijob", "horovod", {"worker_port": 13000}), ("volcano", "horovod", {"clean_pod_policy": "All"}),
    ("volcano", "lightgbm", {"slots_per_worker": 2}), ("indexed-job", "lightgbm", {"clean_pod_policy": "All"}),
    ("indexed-job", "lightgbm", {"slots_per_worker": 2}), ("indexed-job", "pytorch", {"worker_port": 13000}),
    ("volcano", "pytorch", {"worker_port": 13000})])
def test_a_kubernetes_option_the_backend_does_not_use_is_refused_naming_it(kind, framework, option):
    [(field, value)] = option.items()
    spec = TrainingJobSpec(**{**HOROVOD, "framework": framework, "scheduling": {"gang": False}}, kubernetes=option)
    with pytest.raises(JobSubmissionError, match=f"^kubernetes.{field}: the {kind}.* does not use it"):
        backend(kind).render("job", spec, {})
    defaults = TrainingJobSpec(**{**HOROVOD, "framework": framework, "scheduling": {"gang": False}},
                               kubernetes={field: type(value)(TrainingJobSpec.model_fields["kubernetes"].default
                                                              .model_dump()[field])})
    assert backend(kind).render("job", defaults, {}), "the default value, even given explicitly, is fine"


@pytest.mark.parametrize("workers", [2, 12])
def test_f5_an_indexed_pytorch_job_meets_by_static_rendezvous_numbered_by_the_completion_index(workers):
    """Issue 39, F5: node rank from the Job controller's JOB_COMPLETION_INDEX (the kubelet fills in
    ``$(JOB_COMPLETION_INDEX)``), node 0's store at pod 0's stable name; no c10d endpoint, whose store's host
    would be whichever pod that name resolved to when its agent started (none while the record is missing)."""
    job, service = backend("indexed-job").manifests("job", TrainingJobSpec(
        framework="pytorch", command=["python", "train.py"], num_workers=workers, image="img:1"), {})
    (container,) = job["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    options = dict(zip(command[1:-3:2], command[2:-3:2]))
    assert command[0] == "torchrun" and command[-3:] == ["--no-python", "python", "train.py"]
    assert options == {"--nnodes": str(workers), "--node-rank": "$(JOB_COMPLETION_INDEX)",
                       "--master-addr": "job-0.job", "--master-port": "29400", "--nproc-per-node": "1",
                       "--rdzv-backend": "static", "--max-restarts": "0"}
    assert "JOB_COMPLETION_INDEX" not in {var["name"] for var in container["env"]}  # the controller appends it
    assert service["spec"]["ports"] == [{"name": "workers", "port": 29400}]
    assert job["spec"]["template"]["spec"]["subdomain"] == service["metadata"]["name"] == "job"
