"""Issue 39, F1-F4 and F6-F10: what the controllers do with the rendered jobs, played by the controllers' own rules
at the pinned refs (each step cites its upstream file and lines), not by this project's reading of them:
Volcano's job controller and webhook on a crashed or evicted pod, the MPI operator's launcher Job, worker pods and
discover_hosts.sh (which an elastic MPIJob no longer runs: it lists workers that are not Ready), JobSet's defaults and
the Job controller's backoff on a TrainJob's pods, and Horovod's own host discovery on what the launcher's discovery
prints.

Pinned refs: kubeflow/mpi-operator v0.8.0 (101db144e019e1de65aaded07745e9d805c2852a), volcano-sh/volcano
ed72c7c815a9fd547a787134676f73d42e9d049c, kubeflow/trainer v2.3.0 (658725bdae5c7e3a0854d93ac6ff492e109a22ab),
kubernetes-sigs/jobset v0.12.0 (f22e565ac3cc3265c7c45ef67ecffdc689af5d77); Horovod 0.28.1 as the training
environment installs it (scripts/build_horovod.sh).
"""

from __future__ import annotations

import copy
import json
import math
import re
import shlex
import subprocess

import pytest
import yaml
from mpi_operator import worker_labels
from trainer_controller import TORCH_DISTRIBUTED, jobset_for

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState
from airflow_ml_provider.runtime.metrics_log import worker_env
from airflow_ml_provider.runtime.pod_discovery import worker_hosts
from support import REPO, TRAINING_PYTHON, needs_training_env

COMMAND = ["python", "-m", "train"]


def spec(framework: str = "horovod", **fields) -> TrainingJobSpec:
    return TrainingJobSpec(**{"framework": framework, "command": COMMAND, "num_workers": 2, "image": "img:1",
                              **fields})


def manifest(kind: str, job: TrainingJobSpec) -> dict:
    return get_backend(kind, api_client=None, namespace="ml").manifests("job", job, {})[0]


# --- the Job controller (kubernetes pkg/controller/job/job_controller.go) and the kubelet -------------------------

def job_runs(job_spec: dict) -> float:
    """How often a batch/v1 Job's crashing container runs (started, counting a restart begun before the Job
    failed) until the Job fails. backoffLimit defaults to 6 (the Job schema: "Defaults to 6", as the training
    runtime CRD carries it, trainer.kubeflow.org_clustertrainingruntimes.yaml:522-526). Under restartPolicy
    OnFailure the kubelet restarts the container in place and the Job controller sums the restart counts
    (kubernetes pkg/controller/job/job_controller.go:1446-1469 at 6ae037f1db84: with backoffLimit 0 any restart
    fails the Job, else ``>= backoffLimit``); under Never each crash is a failed pod, replaced until
    ``failed > backoffLimit`` (:842, :857-860). The citations: tests/job_controller.py."""
    limit = job_spec.get("backoffLimit", 6)
    policy = job_spec["template"]["spec"].get("restartPolicy")
    runs, lost = 1, 0
    while True:
        lost += 1
        if policy == "OnFailure":
            runs += 1  # the kubelet has restarted it by the time the controller reads restartCount
            if (lost > 0) if limit == 0 else (lost >= limit):
                return runs
        elif policy == "Never":
            if lost > limit:
                return runs
            runs += 1
        else:
            return math.inf


# --- the MPI operator --------------------------------------------------------------------------------------------

def mpi_launcher_job(mpijob: dict) -> dict:
    """pkg/controller/mpi_job_controller.go:1528-1551 ``newLauncherJob``: backoffLimit from runPolicy (:1543), the
    pod's restartPolicy the Launcher replica's (:1616, ``setRestartPolicy`` :1693-1699)."""
    launcher = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]
    template = copy.deepcopy(launcher["template"])
    template["spec"]["restartPolicy"] = launcher["restartPolicy"]
    return {"backoffLimit": mpijob["spec"]["runPolicy"].get("backoffLimit"), "template": template}


def mpi_operator_warnings(mpijob: dict) -> list[str]:
    """The Warning events the operator records while building the launcher (mpi_job_controller.go:1609-1615)."""
    launcher = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    return ["SetPodTemplateRestartPolicy"] if launcher.get("restartPolicy") else []


def discover_hosts_sh(mpijob: dict, running: int) -> str:
    """The script the operator keeps in the launcher's /etc/mpi for ``running`` Running workers of the ones it
    made (``replicas`` pods, :1756-1762): updateDiscoverHostsInConfigMap, :1357-1381 (no launcher-as-worker), of
    getRunningWorkerPods (:834-852), which checks the phase only (:846): Ready or not."""
    name = mpijob["metadata"]["name"]
    pods = sorted(f"{name}-worker-{i}" for i in range(mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]))
    return "#!/bin/sh\n" + "".join(f"echo {pod}.{name}.ml.svc\n" for pod in pods[:running])


def mpi_worker_pods(mpijob: dict, ready: list[bool]) -> list[dict]:
    """The worker pods newWorker makes (:1473-1526: its labels, tests/mpi_operator.py ``worker_labels``; hostname the
    pod's name and subdomain the job, :1486-1487), Running, each Ready or not as the kubelet reports it."""
    name = mpijob["metadata"]["name"]
    return [{"metadata": {"name": f"{name}-worker-{i}", "labels": worker_labels(mpijob, i)},
             "spec": {"hostname": f"{name}-worker-{i}", "subdomain": name},
             "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": str(is_ready)}]}}
            for i, is_ready in enumerate(ready)]


def launcher_discovery(mpijob: dict) -> list[str]:
    """The argv of the launcher's --host-discovery-script."""
    command = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    return shlex.split(command[command.index("--host-discovery-script") + 1])


# --- Volcano's job controller and webhook ------------------------------------------------------------------------

def volcano_admitted(job: dict) -> dict:
    """What Volcano's mutating webhook stores (webhooks/admission/jobs/mutate/mutate_job.go): maxRetry 0 becomes 3
    (:161-166); a task's minAvailable defaults to its replicas (:205-217) and its maxRetry 0 to 3 (:220-223)."""
    job = copy.deepcopy(job)
    if not job["spec"].get("maxRetry"):
        job["spec"]["maxRetry"] = 3
    for task in job["spec"]["tasks"]:
        task.setdefault("minAvailable", task["replicas"])
        task["maxRetry"] = task.get("maxRetry") or 3
    return job


def volcano_action(job: dict, task: str, event: str) -> str:
    """pkg/controllers/job/job_controller_util.go:182-284 ``applyPolicies``: the task's policies, then the job's,
    else SyncJob (:190-191)."""
    def matches(policy: dict) -> bool:
        events = policy.get("events") or [policy.get("event")]
        return event in events or "*" in events

    (own,) = [t for t in job["spec"]["tasks"] if t["name"] == task]
    for policy in [*(own.get("policies") or []), *(job["spec"].get("policies") or [])]:
        if matches(policy):
            return policy["action"]
    return "SyncJob"


def volcano_runs(job: dict, task: str) -> float:
    """How often a crashing trainer of ``task`` runs until the job ends. A container that exits non-zero makes its
    pod Failed only under restartPolicy Never (else the kubelet restarts it in place: the pod stays Running, in
    CrashLoopBackOff), and PodFailed is raised only on the transition to Failed (job_controller_handler.go:272-281).
    AbortJob ends the job (state/running.go:47-51: Aborting); RestartJob counts a retry and restarts it
    (:35-40), until a restart brings RetryCount to maxRetry, which fails the job (state/restarting.go:33-39);
    SyncJob leaves the Failed pod in place (job_controller_actions.go:473-497 creates missing pods only)."""
    job = volcano_admitted(job)
    (template,) = [t["template"] for t in job["spec"]["tasks"] if t["name"] == task]
    runs, retries = 1, 0
    while True:
        if template["spec"].get("restartPolicy", "Always") != "Never":
            return math.inf
        action = volcano_action(job, task, "PodFailed")
        if action == "AbortJob":
            return runs
        if action != "RestartJob":
            return math.inf
        retries += 1
        if retries >= job["spec"]["maxRetry"]:
            return runs
        runs += 1


def trainer_tasks(job: dict) -> list[str]:
    """The tasks whose container's exit is the job's: Horovod's master (horovodrun), every task otherwise."""
    names = [task["name"] for task in job["spec"]["tasks"]]
    return ["master"] if job["spec"]["plugins"].get("ssh") is not None else names


VOLCANO_FRAMEWORKS = ["horovod", "lightgbm", "pytorch", "generic"]


@pytest.mark.parametrize("framework", VOLCANO_FRAMEWORKS)
def test_f3_a_crashing_trainer_ends_the_volcano_job(framework):
    """F3: the Horovod master was OnFailure, so its PodFailed -> AbortJob never fired (the job stayed Running)."""
    job = manifest("volcano", spec(framework, scheduling={"gang": False}))
    for task in trainer_tasks(job):
        assert volcano_runs(job, task) == 1, task


@pytest.mark.parametrize("framework", VOLCANO_FRAMEWORKS)
def test_f4_an_evicted_pod_stops_the_volcano_job_and_only_backoff_limit_restarts_it(framework):
    """F4: one owner of restarts. An evicted pod (any deleted pod raises PodEvicted, job_controller_handler.go:377)
    aborts the job, which the provider resubmits; before, PodEvicted -> RestartJob restarted it too. A crash restarts
    it only as kubernetes.backoff_limit says, and the webhook keeps the rendered maxRetry (it rewrote 0 to 3)."""
    job = manifest("volcano", spec(framework, scheduling={"gang": False}))
    assert volcano_admitted(job)["spec"]["maxRetry"] == job["spec"]["maxRetry"], "the webhook changed maxRetry"
    for task in job["spec"]["tasks"]:
        assert volcano_action(job, task["name"], "PodEvicted") == "AbortJob", task["name"]
    actions = [p["action"] for holder in (job["spec"], *job["spec"]["tasks"]) for p in holder.get("policies") or []]
    assert not [action for action in actions if action.startswith("Restart")], actions
    retried = manifest("volcano", spec(framework, scheduling={"gang": False}, kubernetes={"backoff_limit": 2}))
    for task in trainer_tasks(retried):
        assert volcano_runs(retried, task) == 3, f"{task}: backoff_limit 2 is two restarts after the first run"
        assert volcano_action(retried, task, "PodEvicted") == "AbortJob"


def test_f6_a_crashing_rank_fails_the_trainjob_on_the_default_runtime():
    """F6: a TrainJob cannot set restartPolicy or backoffLimit (trainjob_types.go:370-463); on torch-distributed
    JobSet defaulted the pods to OnFailure (jobset_webhook.go:124-127) and the Job kept backoffLimit 6: a crashing
    rank ran 7 times. The default runtime is the provider's (deploy/kubernetes/trainingruntime.yaml)."""
    trainjob = manifest("trainjob", spec("pytorch"))
    trainjob["metadata"]["uid"] = "0"
    (node,) = jobset_for(trainjob)["spec"]["replicatedJobs"]
    assert job_runs(node["template"]["spec"]) == 1
    assert job_runs(jobset_for(trainjob, TORCH_DISTRIBUTED)["spec"]["replicatedJobs"][0]["template"]["spec"]) == 7
    shipped = yaml.safe_load((REPO / "deploy" / "kubernetes" / "trainingruntime.yaml").read_text())
    assert trainjob["spec"]["runtimeRef"]["name"] == shipped["metadata"]["name"]
    stock = copy.deepcopy(shipped)  # torch-distributed but for its name and the two fields
    stock["metadata"]["name"] = "torch-distributed"
    (job,) = stock["spec"]["template"]["spec"]["replicatedJobs"]
    assert job["template"]["spec"].pop("backoffLimit") == 0
    assert job["template"]["spec"]["template"]["spec"].pop("restartPolicy") == "Never"
    assert stock == TORCH_DISTRIBUTED


@pytest.mark.parametrize("framework", ["horovod", "generic"])
def test_f7_an_mpijob_sets_restart_policies_only_in_its_replica_specs(framework):
    """F7: the template's restartPolicy made the operator record a Warning on every MPIJob."""
    job = manifest("mpijob", spec(framework))
    assert mpi_operator_warnings(job) == []
    for replica in job["spec"]["mpiReplicaSpecs"].values():
        assert "restartPolicy" not in replica["template"]["spec"] and replica["restartPolicy"] == "Never"


@pytest.mark.parametrize("backoff_limit", [0, 2])
def test_f8_the_mpijob_launcher_runs_backoff_limit_plus_one_times(backoff_limit):
    """F8: OnFailure with backoffLimit 0 restarted the launcher in place before the Job failed (two horovodruns)."""
    job = manifest("mpijob", spec(kubernetes={"backoff_limit": backoff_limit}))
    assert job_runs(mpi_launcher_job(job)) == backoff_limit + 1


def test_f9_an_elastic_mpijob_can_grow_to_max_workers():
    """F9: the operator makes ``replicas`` worker pods and the launcher's discovery lists the Ready ones, each with
    its slots: with replicas num_workers, --max-np was never reached. The launcher must start before every worker
    pod is ready (WaitForWorkersReady waits for all of them, mpi_job_controller.go:678)."""
    job = manifest("mpijob", spec(min_workers=1, max_workers=4, kubernetes={"slots_per_worker": 2}))
    assert job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 4
    command = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    max_np = int(command[command.index("--max-np") + 1])
    discovery = launcher_discovery(job)
    hosts = worker_hosts(mpi_worker_pods(job, [True] * 4))
    assert len(hosts) * int(discovery[discovery.index("--slots") + 1]) == max_np == 8
    assert job["spec"]["launcherCreationPolicy"] == "AtStartup"
    assert job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 2, "the launcher and min_workers"
    backend = get_backend("mpijob", api_client=None, namespace="ml")
    status = {"conditions": [{"type": "Created", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
              "replicaStatuses": {"Launcher": {"active": 1}, "Worker": {"active": 2}}}
    # Running is set only once every worker pod runs (mpi_job_controller.go:1163): 2 of 4 is a running job
    assert backend.job_status({"metadata": {"name": "job"}, "status": status}).state is JobState.RUNNING


def test_f10_an_elastic_mpijob_s_launcher_lists_only_its_ready_workers():
    """F10: the operator's discover_hosts.sh lists a Running worker whose sshd does not listen yet (its readiness
    probe fails: :846 checks the phase only), and its headless Service publishes only Ready addresses
    (publishNotReadyAddresses false without runLauncherAsWorker, :1407-1409), so horovodrun's ssh to it failed. The
    launcher runs the provider's pod discovery instead, selecting this job's workers by the labels the operator gives
    them (the operator's own workerSelector, :1751-1754); the selection by a real API server and the service account
    that may list them: tests/integration/kubernetes/test_elastic_and_preemption.py."""
    job = manifest("mpijob", spec(min_workers=1, max_workers=3))
    pods = mpi_worker_pods(job, [True, False, True])
    assert discover_hosts_sh(job, running=3).count("echo ") == 3, "the operator's script: every Running worker"
    discovery = launcher_discovery(job)
    assert discovery[:3] == ["python", "-m", "airflow_ml_provider.runtime.pod_discovery"]
    selector = dict(term.split("=") for term in discovery[discovery.index("--selector") + 1].split(","))
    launcher = {**job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"]["labels"],  # :1564-1566
                "training.kubeflow.org/operator-name": "mpi-operator", "training.kubeflow.org/job-name": "job",
                "training.kubeflow.org/job-role": "launcher"}
    other_job = worker_labels({**job, "metadata": {"name": "other"}}, 0)
    assert [selector.items() <= labels.items() for labels in [*(p["metadata"]["labels"] for p in pods), launcher,
                                                              other_job]] == [True, True, True, False, False]
    assert worker_hosts(pods) == ["job-worker-0.job", "job-worker-2.job"]
    assert "/etc/mpi/discover_hosts.sh" not in json.dumps(job)
    # a fixed-size MPIJob is unchanged: horovodrun over the operator's hostfile
    fixed = manifest("mpijob", spec())["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert fixed["command"] == ["horovodrun", "-np", "2", "--hostfile", "/etc/mpi/hostfile", "--start-timeout", "120",
                                *COMMAND]


def test_f9_an_elastic_volcano_job_can_grow_to_max_workers():
    """F9: max_workers worker pods, the gang the master and min_workers (a task's minAvailable defaults to its
    replicas, mutate_job.go:205-217; the scheduler holds a job whose tasks have fewer than their minAvailable placed,
    pkg/scheduler/api/job_info.go:1073-1101, unless the job's minAvailable is below their sum)."""
    job = volcano_admitted(manifest("volcano", spec(min_workers=1, max_workers=4)))
    tasks = {task["name"]: task for task in job["spec"]["tasks"]}
    assert tasks["worker"]["replicas"] == 4 and job["spec"]["minAvailable"] == 2
    placed = {"master": 1, "worker": 1}
    task_min = sum(task["minAvailable"] for task in tasks.values())
    checked = job["spec"]["minAvailable"] >= task_min  # job_info.go:1075: the per-task check applies
    assert not checked or all(placed[name] >= task["minAvailable"] for name, task in tasks.items())
    assert checked, "the gang is exactly the master and min_workers workers"


def test_f1_a_generic_mpijob_runs_what_the_image_has():
    """F1: ``mpirun`` is not in the training image (Horovod built without MPI, no OpenMPI installed); the ranks are
    started by horovodrun (its Gloo launcher), which is, and know their rank from HOROVOD_RANK."""
    dockerfile = (REPO / "images" / "training" / "Dockerfile").read_text()
    assert "HOROVOD_WITHOUT_MPI=1" in (REPO / "scripts" / "build_horovod.sh").read_text()
    packages = re.search(r"apt-get install -y --no-install-recommends ([^&]*)", dockerfile).group(1).split()
    assert not [p for p in packages if "mpi" in p], packages
    job = manifest("mpijob", spec("generic", num_workers=3))
    programs = [c["command"][0] for r in job["spec"]["mpiReplicaSpecs"].values() for c in r["template"]["spec"]["containers"]]
    assert programs == ["horovodrun", "/usr/sbin/sshd"]
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert launcher == ["horovodrun", "-np", "3", "--hostfile", "/etc/mpi/hostfile", "--start-timeout", "120",
                        *COMMAND]
    # horovodrun passes its own pod's variables on to each rank (VC_TASK_INDEX 0 on a Volcano master)
    assert _rank({"HOROVOD_RANK": "2", "VC_TASK_INDEX": "0"}) == 2


def _rank(env: dict[str, str]) -> int:
    import os
    from unittest import mock

    with mock.patch.dict(os.environ, env, clear=True):
        return worker_env().rank


_DISCOVERY_PROBE = '''
import json, sys
from horovod.runner.elastic.discovery import DiscoveredHosts, HostDiscoveryScript
from horovod.runner.launch import parse_args

def main():
    sys.argv = json.loads(sys.argv[1])
    args = parse_args()
    hosts = HostDiscoveryScript(args.host_discovery_script, args.slots).find_available_hosts_and_slots()
    print(json.dumps({"hosts": hosts, "slots": DiscoveredHosts(hosts, sorted(hosts)).count_available_slots()}))

if __name__ == "__main__":  # safe_shell_exec runs the script through a spawned process, which imports this file
    main()
'''


@needs_training_env
@pytest.mark.parametrize("slots", [1, 2])
@pytest.mark.parametrize("source", ["pod discovery", "operator's script"])
def test_f2_horovods_own_discovery_gives_every_host_its_slots(tmp_path, slots, source):
    """F2: Horovod's own argument parser and HostDiscoveryScript run on the rendered launcher command, its discovery
    printing what the launcher's pod discovery prints for two Ready workers (``host:slots``, its ``--slots``), or what
    the operator's discover_hosts.sh prints, bare host names: without --slots-per-host Horovod's discovery gave each
    None slots and counting them raised TypeError."""
    job = manifest("mpijob", spec(min_workers=1, max_workers=3, kubernetes={"slots_per_worker": slots}))
    command = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    script = tmp_path / "discovery.sh"
    if source == "pod discovery":
        listed = launcher_discovery(job)
        per_host = listed[listed.index("--slots") + 1]
        script.write_text("#!/bin/sh\n" + "".join(f"echo {host}:{per_host}\n"
                                                  for host in worker_hosts(mpi_worker_pods(job, [True, True]))))
        hosts = ["job-worker-0.job", "job-worker-1.job"]
    else:
        script.write_text(discover_hosts_sh(job, running=2))
        hosts = ["job-worker-0.job.ml.svc", "job-worker-1.job.ml.svc"]
    script.chmod(0o755)
    at = command.index("--host-discovery-script") + 1
    argv = [*command[:at], str(script), *command[at + 1:]]
    probe = tmp_path / "probe.py"
    probe.write_text(_DISCOVERY_PROBE)
    done = subprocess.run([str(TRAINING_PYTHON), str(probe), json.dumps(argv)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"hosts": dict.fromkeys(hosts, slots), "slots": 2 * slots}
