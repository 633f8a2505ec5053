"""Parameter-server jobs (tensorflow-ps: a chief, 2 ps, 2 workers) rendered for volcano and indexed-job, run as the
controllers run them (tests/volcano_controller.py: the svc plugin's names, the env plugin's VC_TASK_INDEX, the
chief's TaskCompleted -> CompleteJob; tests/job_controller.py: JOB_COMPLETION_INDEX, <Job>-<i> hosts), every pod a
container of the built training image: each pod's TF_CONFIG completed by the gate, the bundled trainer's loss
decreasing and the chief's checkpoints and model on the job's volume."""

from __future__ import annotations

import pytest
from job_controller import IndexedJob
from pod_containers import CLAIM, JOB_TIMEOUT_S, NAMESPACE, PodNetwork, json_events
from volcano_controller import VolcanoController

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.spec import TrainingJobSpec

pytestmark = pytest.mark.integration


def test_volcano_parameter_servers_train_in_the_image(tmp_path, training_image, network: PodNetwork, claims):
    spec = TrainingJobSpec(
        framework="tensorflow-ps", image=training_image, kubernetes={"volumes": [CLAIM]},
        model_dir="/work/model", checkpoint_dir="/work/checkpoints",
        command=["python", "-m", "airflow_ml_provider.runtime.tf_ps_trainer", "--steps", "100"],
        roles={"chief": {}, "ps": {"count": 2}, "worker": {"count": 2}})
    (job,) = get_backend("volcano", api_client=None, namespace=NAMESPACE).manifests("ps", spec, {})
    controller = VolcanoController(job, network, tmp_path / "controller", claims)
    phase = controller.run(JOB_TIMEOUT_S)
    logs = {host: network.logs(host) for host, _, _ in controller.pod_specs}
    assert phase == "Completed", {host: log[-3000:] for host, log in logs.items()}
    assert sorted(logs) == ["ps-chief-0", "ps-ps-0", "ps-ps-1", "ps-worker-0", "ps-worker-1"]
    for host in ("ps-ps-0", "ps-ps-1", "ps-worker-0", "ps-worker-1"):
        role, index = host.split("-")[1:]
        assert f"{role} {index} serving at {host}.ps:2222" in logs[host], logs[host][-2000:]
    losses = [e["loss"] for e in json_events(logs["ps-chief-0"]) if e.get("event") == "metrics"]
    assert len(losses) == 10 and losses[-1] < losses[0] / 2, logs["ps-chief-0"][-3000:]
    assert (claims["work"] / "model" / "model.npz").is_file()
    assert (claims["work"] / "checkpoints" / "ckpt-100.index").is_file()


def test_indexed_job_parameter_servers_train_in_the_image(tmp_path, training_image, network: PodNetwork, claims):
    """The indexed-job rendering: an Indexed Job per role (tests/job_controller.py each); the servers' pods started
    as their Jobs' controller starts them, the chief's Job followed to its end, which is the job's."""
    spec = TrainingJobSpec(
        framework="tensorflow-ps", image=training_image, kubernetes={"volumes": [CLAIM]}, model_dir="/work/model",
        command=["python", "-m", "airflow_ml_provider.runtime.tf_ps_trainer", "--steps", "100"],
        scheduling={"gang": False}, roles={"chief": {}, "ps": {"count": 2}, "worker": {"count": 2}})
    *jobs, _service = get_backend("indexed-job", api_client=None, namespace=NAMESPACE).manifests("ps", spec, {})
    runs = {job["metadata"]["name"]: IndexedJob(job["metadata"]["name"], job["spec"], network, claims) for job in jobs}
    assert list(runs) == ["ps", "ps-ps", "ps-worker"]
    for servers in (runs["ps-ps"], runs["ps-worker"]):
        for index in range(servers.completions):
            servers._start(index)  # their pods, as the Job controller starts them (followed no further here)
    end = runs["ps"].run(JOB_TIMEOUT_S)
    hosts = [runs[n].host(i) for n in runs for i in range(runs[n].completions)]
    logs = {host: network.logs(host) for host in hosts}
    assert end == "Complete", {h: v[-2000:] for h, v in logs.items()}
    assert sorted(hosts) == ["ps-0", "ps-ps-0", "ps-ps-1", "ps-worker-0", "ps-worker-1"]
    assert "ps 1 serving at ps-ps-1.ps:2222" in logs["ps-ps-1"] and "worker 0 serving" in logs["ps-worker-0"]
    losses = [e["loss"] for e in json_events(logs["ps-0"]) if e.get("event") == "metrics"]
    assert len(losses) == 10 and losses[-1] < losses[0] / 2, logs["ps-0"][-3000:]
    assert (claims["work"] / "model" / "model.npz").is_file()
