"""What Volcano's job controller and its plugins make of a Volcano Job, and its pods run as containers
(tests/pod_containers.py).

Taken from volcano-sh/volcano ed72c7c815a9fd547a787134676f73d42e9d049c (the ref of the pinned CRDs); paths are under
pkg/controllers/job/ there:

- pods ``<job>-<task>-<i>`` (helpers/helpers.go:103-106, ``PodNameFmt``), all of the job's at once: the gang
  (minAvailable) is placed together or not at all;
- svc plugin (plugins/svc/svc.go): hostname the pod's name and subdomain the job (:88-93), the ConfigMap
  ``<job>-svc`` (:305-307) of ``<task>.host`` (one ``<hostname>.<subdomain>`` a line), ``VC_<TASK>_HOSTS`` and
  ``VC_<TASK>_NUM`` (``GenerateHosts`` :310-345; keys plugins/svc/const.go:21-28) mounted on /etc/volcano
  (:194-217), and the same two variables in every container (:99-125);
- ssh plugin (plugins/ssh/ssh.go): an RSA 2048 key, ``authorized_keys`` and a ``config`` naming every pod
  (``generateRsaKey`` :202-233, ``generateSSHConfig`` :262-285) in the Secret ``<job>-ssh``, mounted at
  /root/.ssh with mode 0600 (``mountRsaKey`` :144-200; const.go:21-36);
- env plugin (plugins/env/env.go:45-58): ``VK_TASK_INDEX`` and ``VC_TASK_INDEX``, the pod's index in its task;
- pytorch plugin (plugins/distributed-framework/pytorch/pytorch.go ``OnPodCreate`` :91-146): MASTER_ADDR (the
  master task's pod 0, ``generateMasterAddr`` :159), MASTER_PORT (--port, default 23456: :35-36, :78), WORLD_SIZE
  (the master and worker tasks' replicas, ``getTotalReplicas`` :148-157), RANK (0 for the master, 1 + the index
  for a worker);
- lifecycle: a pod of restartPolicy Never that exits non-zero is Failed and raises PodFailed
  (job_controller_handler.go:272-281; OnFailure pods restart in place and raise nothing); a pod's success that
  completes its task raises TaskCompleted (:283-287); the task's policies are looked up first, then the job's
  (job_controller_util.go:182-284, ``applyPolicies``); AbortJob, CompleteJob and RestartJob kill the job's pods
  (state/running.go:33-61), RestartJob counts a retry and a job whose retries reach maxRetry fails
  (state/restarting.go:33-39); with no policy for an event, the job ends once every pod has ended, Completed when
  at least minAvailable succeeded, else Failed (state/running.go:62-112).

With ``api`` (tests/pod_api.py) the pods are Pod objects of a real API server as well, created as the controller
creates them (job_controller_actions.go:475-480) and their phase and readiness reported as the kubelet would (a
pod's rendered TCP readiness probe checked until it passes): for what a pod reads from the API (the elastic Horovod
master's pod discovery, which takes only Ready pods).
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import time
from pathlib import Path

from pod_api import PodApi
from pod_containers import PodNetwork

SVC_MOUNT = "/etc/volcano"  # plugins/svc/const.go:28
SSH_MOUNT = "/root/.ssh"  # plugins/ssh/const.go:33


class VolcanoController:
    """Runs one Volcano Job to its end: ``run`` returns the phase it ends in (Completed, Failed, Aborted)."""

    def __init__(self, job: dict, pods: PodNetwork, directory: Path, claims: dict[str, Path], api: PodApi | None = None):
        self.job, self.pods, self.directory, self.claims, self.api = copy.deepcopy(job), pods, directory, claims, api
        self.name = self.job["metadata"]["name"]
        self.plugins = self.job["spec"].get("plugins") or {}
        self.retries = 0
        self.runs: list[dict[str, str]] = []  # per run of the job's pods: hostname -> container name
        self.pod_specs = [(f"{self.name}-{task['name']}-{i}", task, i)
                          for task in self.job["spec"]["tasks"] for i in range(task.get("replicas", 1))]
        self.mounts: dict[str, Path] = {}
        self._ready_pods: set[str] = set()  # (emptied by each start of the pods: they are probed again)
        if "svc" in self.plugins:
            self.mounts[SVC_MOUNT], self.svc_env = self._svc_config_map()
        if "ssh" in self.plugins:
            self.mounts[SSH_MOUNT] = self._ssh_secret()

    def _svc_config_map(self) -> tuple[Path, dict[str, str]]:
        """GenerateHosts (svc.go:310-345) as the ConfigMap ``<job>-svc``, and the env its keys give (:99-125)."""
        data = {}
        for task in self.job["spec"]["tasks"]:
            hosts = [f"{self.name}-{task['name']}-{i}.{self.name}" for i in range(task.get("replicas", 1))]
            key = task["name"].replace("-", "_")
            data[f"{key}.host"] = "\n".join(hosts)
            data[f"VC_{key.upper()}_HOSTS"] = ",".join(hosts)
            data[f"VC_{key.upper()}_NUM"] = str(len(hosts))
        directory = self.directory / f"{self.name}-svc"
        directory.mkdir(parents=True)
        for key, value in data.items():
            (directory / key).write_text(value)
        return directory, {k: v for k, v in data.items() if k.startswith("VC_")}

    def _ssh_secret(self) -> Path:
        """generateRsaKey (ssh.go:202-233) and generateSSHConfig (:262-285, port 22) as mountRsaKey mounts them."""
        secret = self.directory / f"{self.name}-ssh"
        secret.mkdir(parents=True)
        subprocess.run(["ssh-keygen", "-t", "rsa", "-b", "2048", "-m", "PEM", "-N", "", "-q", "-f",
                        str(secret / "id_rsa")], check=True)
        shutil.copy(secret / "id_rsa.pub", secret / "authorized_keys")
        config = "StrictHostKeyChecking no\nUserKnownHostsFile /dev/null\n"
        for hostname, _, _ in self.pod_specs:
            config += f"Host {hostname}\n  HostName {hostname}.{self.name}\n  Port 22\n"
        (secret / "config").write_text(config)
        for path in secret.iterdir():
            path.chmod(0o600)  # DefaultMode 0600 (ssh.go:157, 172)
        return secret

    def _pytorch_env(self, task: dict, index: int) -> dict[str, str]:
        """pytorch.go OnPodCreate, from the plugin's arguments (defaults master, worker, 23456)."""
        args = {"master": "master", "worker": "worker", "port": "23456"}
        args.update(arg.lstrip("-").split("=", 1) for arg in self.plugins["pytorch"])
        roles = (args["master"], args["worker"])
        size = sum(t.get("replicas", 1) for t in self.job["spec"]["tasks"] if t["name"] in roles)
        rank = 0 if task["name"] == args["master"] else index + 1
        return {"MASTER_ADDR": f"{self.name}-{args['master']}-0.{self.name}", "MASTER_PORT": args["port"],
                "WORLD_SIZE": str(size), "RANK": str(rank)}

    def _start_all(self) -> dict[str, str]:
        self._ready_pods.clear()
        started = {}
        for hostname, task, index in self.pod_specs:
            pod = copy.deepcopy(task["template"]["spec"])
            env = dict(getattr(self, "svc_env", {}))
            if "env" in self.plugins:
                env.update(VK_TASK_INDEX=str(index), VC_TASK_INDEX=str(index))
            if "pytorch" in self.plugins and task["name"] in ("master", "worker"):
                env.update(self._pytorch_env(task, index))
            mounts, hosts = self.mounts, None
            if self.api is not None:
                if hostname in self.api.phases:  # the pod of the run before
                    self.api.delete(hostname)
                self.api.create(hostname, task["template"], self.name)
                env, mounts, hosts = {**env, **self.api.env}, {**mounts, **self.api.mounts}, self.api.hosts
            started[hostname] = self.pods.start(hostname, self.name, pod, pod["containers"][0], extra_env=env,
                                                mounts=mounts, claims=self.claims, hosts=hosts)
        return started

    def _policy(self, task: dict, event: str) -> str | None:
        """applyPolicies (job_controller_util.go:182-284): the task's policies, then the job's."""
        for policy in [*(task.get("policies") or []), *(self.job["spec"].get("policies") or [])]:
            if event in [policy.get("event"), *(policy.get("events") or [])]:
                return policy["action"]
        return None

    def _phase_of(self, hostname: str, task: dict) -> str:
        """The pod's phase from its container: Never pods end Succeeded/Failed, OnFailure ones only Succeeded."""
        state = self.pods.state(hostname)
        if state["Status"] not in ("exited", "stopped"):
            return "Running"
        restart = task["template"]["spec"].get("restartPolicy", "Always")
        if state["ExitCode"] == 0 and restart != "Always":
            return "Succeeded"
        return "Failed" if restart == "Never" else "Running"  # the kubelet restarts it in place

    def _ready(self, hostname: str, task: dict) -> bool:
        """A running pod's readiness: its container's TCP readiness probe passes (checked until it does, as the
        kubelet's prober keeps a passing pod Ready), or it has none."""
        port = task["template"]["spec"]["containers"][0].get("readinessProbe", {}).get("tcpSocket", {}).get("port")
        if port is None or hostname in self._ready_pods:
            return True
        if self.pods.listening(hostname, port):
            self._ready_pods.add(hostname)
            return True
        return False

    def _kill_all(self) -> None:
        for hostname, _, _ in self.pod_specs:
            self.pods.kill(hostname)

    def run(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        max_retry = self.job["spec"].get("maxRetry", 3)
        while True:
            self.runs.append(self._start_all())
            action, phase = self._follow(deadline)
            if action == "RestartJob":
                self._kill_all()
                self.retries += 1  # state/running.go:35-40
                if self.retries >= max_retry:  # state/restarting.go:33-39
                    return "Failed"
                for hostname, _, _ in self.pod_specs:
                    self.pods.rename_stopped(hostname, f"{hostname}-run{self.retries}")
                continue
            return phase

    def _follow(self, deadline: float) -> tuple[str | None, str]:
        """Watch the pods until an event's policy acts or the job ends: (action, phase)."""
        phases: dict[str, str] = {}
        while time.monotonic() < deadline:
            for hostname, task, _ in self.pod_specs:
                try:
                    phase = self._phase_of(hostname, task)
                except subprocess.CalledProcessError:  # podman busy (a container restarting in place): no news now
                    continue
                before, phases[hostname] = phases.get(hostname, "Running"), phase
                if self.api is not None:
                    self.api.report(hostname, phase, phase == "Running" and self._ready(hostname, task))
                event = None
                if phases[hostname] == "Failed" and before != "Failed":
                    event = "PodFailed"
                elif phases[hostname] == "Succeeded" and before != "Succeeded" and all(
                        phases.get(h) == "Succeeded" for h, t, _ in self.pod_specs if t is task):
                    event = "TaskCompleted"
                action = self._policy(task, event) if event else None
                if action in ("AbortJob", "CompleteJob"):
                    self._kill_all()
                    return action, "Aborted" if action == "AbortJob" else "Completed"
                if action == "RestartJob":
                    return action, "Restarting"
            if len(phases) == len(self.pod_specs) and all(p in ("Succeeded", "Failed") for p in phases.values()):
                succeeded = sum(p == "Succeeded" for p in phases.values())
                return None, "Completed" if succeeded >= self.job["spec"].get("minAvailable", 0) else "Failed"
            time.sleep(1)
        self._kill_all()
        return None, "Running"
