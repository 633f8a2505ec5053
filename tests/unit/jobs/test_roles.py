"""Jobs of several roles in the spec (jobs.roles): what a tensorflow-ps job's roles may be, each refusal naming
the field, the roles' default policies and TF_CONFIG, and the backends that cannot render roles refusing them."""

from __future__ import annotations

import json

import pytest

from airflow_ml_provider.jobs import roles as job_roles
from airflow_ml_provider.jobs.spec import Framework, SpecError, TrainingJobSpec

TRAINER = ["python", "-m", job_roles.PS_TRAINER]
PS_ROLES = {"chief": {}, "ps": {"count": 2}, "worker": {"count": 4, "min_count": 2, "max_count": 8}}


def _ps(**overrides) -> TrainingJobSpec:
    return TrainingJobSpec(**{"framework": "tensorflow-ps", "command": TRAINER, "roles": PS_ROLES, **overrides})


def test_a_ps_job_counts_its_processes_and_takes_each_roles_default_policy():
    spec = _ps(resources={"cpu": 2})
    assert spec.framework is Framework.TENSORFLOW_PS and spec.num_workers == 7
    assert {name: job_roles.policy(name, role).value for name, role in spec.roles.items()} == {
        "chief": "fail", "ps": "fail", "worker": "tolerate"}
    assert spec.roles["worker"].elastic and not spec.roles["ps"].elastic
    # the spec as the local backend stores it (job.json) and a task rebuilds it
    assert TrainingJobSpec.model_validate(spec.model_dump(mode="json")) == spec


def test_a_role_has_its_own_command_image_resources_and_policy():
    spec = _ps(roles={"chief": {"command": ["python", "chief.py"], "resources": {"cpu": 4, "memory": "8Gi"}},
                      "ps": {"image": "ps:1", "priority_class": "high"}, "worker": {"on_failure": "fail"}})
    assert spec.roles["chief"].command == ["python", "chief.py"] and spec.roles["chief"].resources.memory == "8Gi"
    assert spec.roles["ps"].image == "ps:1" and spec.roles["ps"].priority_class == "high"
    assert job_roles.policy("worker", spec.roles["worker"]) is job_roles.OnFailure.FAIL


@pytest.mark.parametrize(("roles", "field"), [
    ({"chief": {}, "ps": {"count": 2, "min_count": 1}, "worker": {}}, "roles.ps.min_count: parameter servers are "
                                                                      "never elastic"),
    ({"chief": {}, "ps": {"on_failure": "tolerate"}, "worker": {}}, "roles.ps.on_failure: "),
    ({"chief": {"count": 2}, "ps": {}, "worker": {}}, "roles.chief.count: a tensorflow-ps job has one chief"),
    ({"chief": {}, "ps": {}}, "roles.worker: a tensorflow-ps job needs a chief"),
    ({"chief": {}, "ps": {}, "worker": {}, "evaluator": {}}, "roles.evaluator: a tensorflow-ps job's roles are"),
    ({"chief": {}, "ps": {}, "worker": {"command": "python train.py"}}, "roles.worker.command: must be an argv list"),
    ({"chief": {}, "ps": {}, "worker": {"command": ["python;rm", "x"]}}, "roles.worker.command: the program"),
    ({"chief": {}, "ps": {}, "worker": {"count": 3, "min_count": 4}}, r"roles.worker: min_count \(4\) <= count"),
    ({"chief": {}, "ps": {"resources": {"gpu": -1}}, "worker": {}}, "roles.ps.resources.gpu"),
    ({"chief": {}, "ps": {}, "Worker_1": {}}, r"roles.Worker_1.\[key\]"),
    ({"chief": {}, "ps": {"spare": 1}, "worker": {}}, "roles.ps.spare: Extra inputs"),
])
def test_each_invalid_role_is_refused_naming_its_field(roles, field):
    with pytest.raises(SpecError, match=field):
        _ps(roles=roles)


def test_roles_belong_to_tensorflow_ps_and_its_process_count():
    with pytest.raises(SpecError, match="roles: a tensorflow-ps job needs roles chief, ps and worker"):
        TrainingJobSpec(framework="tensorflow-ps", command=TRAINER, num_workers=2)
    with pytest.raises(SpecError, match="roles: only framework 'tensorflow-ps' runs jobs of several roles "
                                        r"\(got framework 'horovod'\)"):
        TrainingJobSpec(framework="horovod", command=TRAINER, roles=PS_ROLES)
    with pytest.raises(SpecError, match=r"num_workers \(3\) must be the roles' processes \(7\), or unset"):
        _ps(num_workers=3)
    with pytest.raises(SpecError, match="min_workers/max_workers: a job of roles sets each role's min_count"):
        _ps(max_workers=9, num_workers=7)


@pytest.mark.parametrize("trainer", job_roles.KERAS3_TRAINERS)
def test_a_bundled_keras3_trainer_under_parameter_servers_is_refused_saying_why(trainer):
    with pytest.raises(SpecError, match=rf"command: {trainer} trains a Keras 3 model, and Keras 3 does not support "
                                        r"ParameterServerStrategy \(keras-team/keras#18624\)"):
        _ps(command=["python", "-m", trainer])
    with pytest.raises(SpecError, match=r"roles.chief.command: .*keras-team/keras#18624"):
        _ps(roles={**PS_ROLES, "chief": {"command": ["python", trainer.replace(".", "/") + ".py"]}})


def test_each_process_gets_the_cluster_and_its_own_task_in_tf_config():
    cluster = {"chief": ["h:1"], "ps": ["h:2", "h:3"], "worker": ["h:4"]}
    env = job_roles.task_env(cluster, "ps", 1, rank=2)
    assert json.loads(env["TF_CONFIG"]) == {"cluster": cluster, "task": {"type": "ps", "index": 1}}
    assert (env["AIRFLOW_ML_ROLE"], env["AIRFLOW_ML_ROLE_INDEX"], env["AIRFLOW_ML_RANK"]) == ("ps", "1", "2")


@pytest.mark.parametrize("kind", ["mpijob", "trainjob"])
def test_the_backends_that_cannot_render_roles_refuse_them_naming_the_field_and_those_that_can(kind):
    from airflow_ml_provider.jobs.backends import get_backend, role_backends
    from airflow_ml_provider.jobs.backends.base import JobSubmissionError

    backend = get_backend(kind, api_client=None, namespace="ml", **({"training_runtime": "rt"} if kind == "trainjob" else {}))
    with pytest.raises(JobSubmissionError, match=f"^roles: the {kind} backend does not render jobs of several roles; "
                                                 f"backends that do: {', '.join(role_backends())}$"):
        backend.render("job", _ps(image="img:1"), {})
    assert role_backends() == ["local", "volcano", "indexed-job"]


def test_volcano_renders_a_task_per_role_with_its_own_pods_policy_and_gang_share():
    from airflow_ml_provider.jobs.backends import get_backend

    spec = _ps(image="img:1", timeout_s=600, scheduling={"priority_class": "normal"},
               roles={"chief": {"resources": {"cpu": 2}}, "ps": {"count": 2, "priority_class": "high", "image": "ps:2"},
                      "worker": {"count": 4, "min_count": 2, "command": ["python", "worker.py"]}})
    [job] = get_backend("volcano", api_client=None, namespace="ml").manifests("job", spec, {})
    body = job["spec"]
    tasks = {task["name"]: task for task in body["tasks"]}
    assert list(tasks) == ["chief", "ps", "worker"] and body["plugins"] == {"svc": [], "env": []}
    assert [tasks[r]["replicas"] for r in tasks] == [1, 2, 4] and body["minAvailable"] == 1 + 2 + 2
    assert tasks["chief"]["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"},
                                          {"event": "PodFailed", "action": "AbortJob"}]
    assert tasks["ps"]["policies"] == [{"event": "PodFailed", "action": "AbortJob"}]
    assert "policies" not in tasks["worker"] and tasks["worker"]["minAvailable"] == 2
    assert body["policies"] == [{"event": "PodEvicted", "action": "AbortJob"}]  # the provider resubmits
    pods = {name: task["template"]["spec"] for name, task in tasks.items()}
    assert {name: pod["restartPolicy"] for name, pod in pods.items()} == {
        "chief": "Never", "ps": "Never", "worker": "OnFailure"}
    assert (pods["ps"]["priorityClassName"], pods["chief"]["priorityClassName"]) == ("high", "normal")
    containers = {name: pod["containers"][0] for name, pod in pods.items()}
    assert containers["ps"]["image"] == "ps:2" and containers["chief"]["image"] == "img:1"
    assert containers["chief"]["resources"]["requests"] == {"cpu": "2.0"} and "requests" not in containers["ps"]["resources"]
    gate = ["python", "-m", "airflow_ml_provider.runtime.tf_config", "--task-index", "$(VC_TASK_INDEX)", "--"]
    assert containers["worker"]["command"] == [*gate, "python", "worker.py"]
    assert containers["ps"]["command"] == [*gate, *TRAINER]
    env = {item["name"]: item.get("value") for item in containers["ps"]["env"]}
    assert json.loads(env["TF_CONFIG"]) == {"cluster": {
        "chief": ["job-chief-0.job:2222"], "ps": ["job-ps-0.job:2222", "job-ps-1.job:2222"],
        "worker": [f"job-worker-{i}.job:2222" for i in range(4)]}, "task": {"type": "ps", "index": 0}}
    assert env["AIRFLOW_ML_ROLE"] == "ps" and containers["ps"]["ports"] == [{"containerPort": 2222}]


def test_the_gate_completes_tf_config_with_the_pods_index_and_becomes_the_command():
    import os
    import subprocess
    import sys

    config = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}}
    shown = "import os; print(os.environ['TF_CONFIG']); print(os.environ['AIRFLOW_ML_ROLE_INDEX'])"
    done = subprocess.run([sys.executable, "-m", "airflow_ml_provider.runtime.tf_config", "--task-index", "1", "--",
                           sys.executable, "-c", shown], env={**os.environ, "TF_CONFIG": json.dumps(config)},
                          capture_output=True, text=True, check=True)
    tf_config, index = done.stdout.splitlines()
    assert json.loads(tf_config) == {**config, "task": {"type": "worker", "index": 1}} and index == "1"
    unexpanded = subprocess.run([sys.executable, "-m", "airflow_ml_provider.runtime.tf_config", "--task-index",
                                 "$(VC_TASK_INDEX)", "--", "true"], capture_output=True, text=True)
    assert unexpanded.returncode == 2 and "needs --task-index N" in unexpanded.stderr


def test_indexed_job_renders_an_indexed_job_per_role_behind_one_headless_service():
    from airflow_ml_provider.jobs.backends import get_backend
    from airflow_ml_provider.jobs.backends.kubernetes.roles import owned_by

    spec = _ps(image="img:1", timeout_s=600, scheduling={"gang": False}, kubernetes={"backoff_limit": 2},
               roles={"chief": {}, "ps": {"count": 2, "priority_class": "high"}, "worker": {"count": 3}})
    backend = get_backend("indexed-job", api_client=None, namespace="ml")
    *jobs, service = backend.manifests("job", spec, {})
    assert [(job["metadata"]["name"], job["spec"]["completions"], job["spec"]["backoffLimit"]) for job in jobs] == [
        ("job", 1, 2), ("job-ps", 2, 0), ("job-worker", 3, 2)]  # the chief's first: its status is the job's
    pods = [job["spec"]["template"]["spec"] for job in jobs]
    assert [pod["restartPolicy"] for pod in pods] == ["Never", "Never", "OnFailure"]
    assert {pod["subdomain"] for pod in pods} == {"job"} and pods[1]["priorityClassName"] == "high"
    assert {job["spec"]["activeDeadlineSeconds"] for job in jobs} == {600}
    assert (service["metadata"]["name"], service["spec"]["clusterIP"], service["spec"]["ports"][0]["port"]) == (
        "job", "None", 2222)
    container = pods[1]["containers"][0]
    assert container["command"][3:6] == ["--task-index", "$(JOB_COMPLETION_INDEX)", "--"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert json.loads(env["TF_CONFIG"])["cluster"] == {
        "chief": ["job-0.job:2222"], "ps": ["job-ps-0.job:2222", "job-ps-1.job:2222"],
        "worker": ["job-worker-0.job:2222", "job-worker-1.job:2222", "job-worker-2.job:2222"]}
    created = {**jobs[0], "metadata": {**jobs[0]["metadata"], "uid": "u-1"}}
    owned = backend.dependents(created, [*jobs[1:], service])
    assert [obj["metadata"].get("ownerReferences") for obj in owned] == [
        [{"apiVersion": "batch/v1", "kind": "Job", "name": "job", "uid": "u-1"}]] * 2 + [None]
    assert owned_by(created, []) == []


def test_indexed_job_refuses_roles_under_kueue_which_would_admit_each_roles_job_alone():
    from airflow_ml_provider.jobs.backends import get_backend
    from airflow_ml_provider.jobs.backends.base import JobSubmissionError

    backend = get_backend("indexed-job", api_client=None, namespace="ml", queueing="kueue")
    with pytest.raises(JobSubmissionError, match="^roles: under Kueue, indexed-job would have each role's Job "
                                                 "admitted alone"):
        backend.render("job", _ps(image="img:1", scheduling={"gang": False, "queue": "research"}), {})
