"""Issue 39: every program and module a rendered job invokes is in the built training image and runs there as the
user the job's pod runs as.

The jobs of every Kubernetes backend x framework it takes (fixed-size and elastic, with the commands the operators
and the shipped DAGs give each framework) are rendered, a TrainJob's as the JobSet Trainer makes of it
(tests/trainer_controller.py); of each container's argv the first element is a program looked up on the image's
PATH, the user's command behind a launcher (horovodrun, torchrun ``--no-python``) another, ``python -m X`` a module,
and an elastic job's host-discovery command one more. Each is then run in a container of the image (``podman run``)
as the pod's user: its ``runAsUser`` where the pod sets one (the sshd pods: root), else the image's own user
(``--help``, ``sshd -t``, ``horovodrun --check-build``, ``python -m X --help``). A Dockerfile that stopped installing
openssh, Horovod or torch, or that left a module out, fails here.
"""

from __future__ import annotations

import json
import re
import shlex

import pytest
from trainer_controller import jobset_for
from training_image import image_user, run_in_image

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from support import REPO

pytestmark = pytest.mark.integration

MODULE = "airflow_ml_provider.runtime."
# The command each framework's operator gives a job (operators/training.py, preprocess.py, evaluate.py, scoring.py)
COMMANDS = {
    "horovod": [["python", "-m", MODULE + "horovod_keras", "--epochs", "1"]],
    "lightgbm": [["python", "-m", MODULE + "lightgbm_trainer"]],
    "pytorch": [["python", "-m", MODULE + "torch_ddp"]],
    "xgboost": [["python", "-m", MODULE + "xgboost_trainer"]],
    "tensorflow-ps": [["python", "-m", MODULE + "tf_ps_trainer"]],
    "generic": [["python", "-m", MODULE + "preprocess"], ["python", "-m", MODULE + "evaluate"],
                ["python", "-m", MODULE + "score", "--model", "/models/m"]],
}
ELASTIC = {"min_workers": 1, "max_workers": 3}
PS_ROLES = {"chief": {}, "ps": {}, "worker": {"count": 2}}  # a job of several roles (tensorflow-ps)
# How a program is shown to run without starting a job; --help for the rest.
PROBES = {"sshd": ["-t"], "horovodrun": ["--check-build"]}
# Run in the image by its own Python: each check's outcome as one JSON line.
CHECKER = r"""
import json, shutil, subprocess, sys
for check in json.loads(sys.argv[1]):
    path = shutil.which(check["program"])
    out = {"check": check, "path": path}
    if path:
        try:
            done = subprocess.run([path, *check["probe"]], capture_output=True, text=True, timeout=240)
            out.update(code=done.returncode, stdout=done.stdout[-3000:], stderr=done.stderr[-3000:])
        except subprocess.TimeoutExpired:
            out.update(code=None, stdout="", stderr="timed out")
    print(json.dumps(out), flush=True)
"""


def _runs() -> list[tuple[str, str, dict]]:
    runs = []
    for kind in ("mpijob", "volcano", "indexed-job", "trainjob"):
        backend = get_backend(kind, api_client=None, namespace="ml")
        for framework in sorted(f.value for f in backend.frameworks):
            runs.append((kind, framework, {}))
            if framework == "horovod":
                runs.append((kind, framework, ELASTIC))
    return runs


def _containers(kind: str, obj: dict) -> list[tuple[dict, dict]]:
    """(pod spec, container) of every container the job's pods run."""
    if kind == "trainjob":
        obj = jobset_for({**obj, "metadata": {**obj["metadata"], "uid": "0"}})
        templates = [job["template"]["spec"]["template"] for job in obj["spec"]["replicatedJobs"]]
    elif kind == "mpijob":
        templates = [replica["template"] for replica in obj["spec"]["mpiReplicaSpecs"].values()]
    elif kind == "volcano":
        templates = [task["template"] for task in obj["spec"]["tasks"]]
    else:
        templates = [obj["spec"]["template"]]
    return [(t["spec"], c) for t in templates for c in t["spec"]["containers"]]


def _user(pod: dict, container: dict, image: str) -> str:
    """Who the container runs as: its or its pod's runAsUser[/runAsGroup], else the image's USER."""
    merged = {**(pod.get("securityContext") or {}), **(container.get("securityContext") or {})}
    if "runAsUser" in merged:
        return f"{merged['runAsUser']}:{merged.get('runAsGroup', merged['runAsUser'])}"
    return image_user(image)


def _checks_of(argv: list[str], command: list[str]) -> list[dict]:
    """The programs and modules of one container's argv (``command`` is the user's, behind any launcher)."""
    programs = [argv[0]]
    if argv != command and argv[-len(command):] == command:  # a launcher: the user's command is its tail, run by
        programs.append(command[0])  # it on this image (a server, sshd, runs none)
    if "--host-discovery-script" in argv:  # every backend's discovery is a program of the image
        discovery_argv = shlex.split(argv[argv.index("--host-discovery-script") + 1])
        programs.append(discovery_argv[0])
        argv = [*argv, *discovery_argv]
    checks = [{"program": p, "probe": PROBES.get(p.rsplit("/", 1)[-1], ["--help"])} for p in programs]
    for i, word in enumerate(argv[:-1]):
        if word == "-m" and argv[i - 1].rsplit("/", 1)[-1].startswith("python"):
            checks.append({"program": argv[i - 1], "probe": ["-m", argv[i + 1], "--help"]})
    return checks


def rendered_checks(image: str) -> dict[str, list[dict]]:
    """Every distinct check of every rendered job, by the user it must run as."""
    by_user: dict[str, list[dict]] = {}
    for kind, framework, bounds in _runs():
        assert framework in COMMANDS, f"{kind} takes {framework}: add the command its operator gives it to COMMANDS"
        for command in COMMANDS[framework]:
            size = {"roles": PS_ROLES} if framework == "tensorflow-ps" else {"num_workers": 2}
            spec = TrainingJobSpec(framework=framework, command=command, image=image,
                                   scheduling={"gang": False}, **size, **bounds)
            for obj in get_backend(kind, api_client=None, namespace="ml").manifests("job", spec, {}):
                for pod, container in _containers(kind, obj) if "spec" in obj and obj["kind"] != "Service" else []:
                    argv = [*container.get("command", []), *container.get("args", [])]
                    for check in _checks_of(argv, command):
                        checks = by_user.setdefault(_user(pod, container, image), [])
                        if check not in checks:
                            checks.append(check)
    return by_user


def test_what_the_jobs_run_covers_every_module_the_operators_and_dags_name(training_image):
    """The rendered jobs above name every runtime module an operator or a shipped DAG starts (a new one is checked
    here as soon as the code names it)."""
    named = set()
    for path in [*(REPO / "airflow_ml_provider" / "operators").glob("*.py"), *(REPO / "dags").glob("*.py")]:
        named |= set(re.findall(r'"(airflow_ml_provider\.runtime\.[a-z_]+)"', path.read_text()))
    checked = {c["probe"][1] for checks in rendered_checks(training_image).values() for c in checks
               if c["probe"][0] == "-m"}
    assert named and named <= checked, f"not rendered here: {sorted(named - checked)}"


def test_every_program_and_module_a_rendered_job_runs_is_in_the_image_and_runs_as_its_user(training_image):
    by_user = rendered_checks(training_image)
    assert image_user(training_image) not in ("", "0", "root", "0:0"), "the image's own user must not be root"
    assert "0:0" in by_user, "the sshd pods (MPIJob, Volcano Horovod) ask for root"
    failures, seen = [], 0
    for user, checks in by_user.items():
        done = run_in_image(training_image, ["python", "-c", CHECKER, json.dumps(checks)], user=user, timeout=580)
        results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"check"')]
        assert done.returncode == 0 and len(results) == len(checks), (user, done.stdout[-2000:], done.stderr[-2000:])
        for result in results:
            seen += 1
            check = result["check"]
            if not result["path"]:
                failures.append(f"as {user}: {check['program']} is not on the image's PATH")
            elif result["code"] != 0:
                failures.append(f"as {user}: {check['program']} {shlex.join(check['probe'])} exited {result['code']}:"
                                f"\n{result['stdout']}{result['stderr']}")
            elif check["program"] == "horovodrun":
                built = result["stdout"]
                assert re.search(r"\[X\] TensorFlow", built) and re.search(r"\[X\] Gloo", built), built
    assert not failures, "\n".join(failures)
    assert seen >= 10
