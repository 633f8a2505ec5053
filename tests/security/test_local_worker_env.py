"""A local job started from a process full of secrets: no worker, nor any process between it and the
launcher (the launcher included), can read them; explicit job secrets reach the workers and no record;
every job record is private whatever the umask.

The worker reports its own environment and, through /proc, that of every ancestor up to init (horovodrun's
middlemen, the launcher, and the warm launcher that forked it: a forked launcher's /proc environment is the
server's), as one JSON line.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from airflow_ml_provider.jobs.backends.local import sandbox as local_sandbox
from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState
from support import TRAINING_IMAGE, needs_horovod, wait_for

pytestmark = pytest.mark.integration

TASK_SECRETS = {
    "AIRFLOW_CONN_WAREHOUSE": "postgres://etl:conn-Secr3t@db/warehouse",
    "AIRFLOW__CORE__FERNET_KEY": "fernet-Secr3t-key",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://airflow:db-Secr3t@db/airflow",
    "AIRFLOW_VAR_API_TOKEN": "var-Secr3t-token",
    "AWS_SECRET_ACCESS_KEY": "aws-Secr3t-key",
    "MLFLOW_TRACKING_PASSWORD": "mlflow-Secr3t-pw",
    "MLFLOW_TRACKING_TOKEN": "mlflow-Secr3t-token",
}
EXPLICIT = ("OBJECT_STORE_KEY", "explicit-Secr3t")  # handed to submit(secrets=...) for the workers

WORKER = r"""
import json, os
def environ_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            items = handle.read().decode(errors="replace").split("\0")
    except PermissionError:  # a process of another user (the sandbox's spawner, once it became the job's)
        return {}
    return dict(item.split("=", 1) for item in items if "=" in item)
def parent_of(pid):
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[1])
chain, pid = {}, os.getppid()
while pid > 1:
    chain[pid] = environ_of(pid)
    pid = parent_of(pid)
redact = lambda env: {k: "<present>" if k == "OBJECT_STORE_KEY" else v for k, v in env.items()}
print(json.dumps({"environ": redact(dict(os.environ)), "chain": {p: redact(e) for p, e in chain.items()}}), flush=True)
"""

JOB_VARIABLES = {"VIRTUAL_ENV", "PYTHONUNBUFFERED", "OMP_WAIT_POLICY", "JOB_SETTING", EXPLICIT[0]}
ALLOWED = {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME"}


def permitted(name: str, framework: str, sandbox: str = "off") -> bool:
    # horovodrun adds its rendezvous variables, and starts each rank through sh, which sets PWD; so does
    # bubblewrap (the sandbox's start directory); the launcher quiets TensorFlow's start-up notices in
    # horovodrun and its ranks (TF_CPP_MIN_LOG_LEVEL, a fixed setting)
    return (name in ALLOWED or name in JOB_VARIABLES or name.startswith(("LC_", "AIRFLOW_ML_"))
            or (name == "PWD" and (framework == "horovod" or sandbox != "off"))
            or (framework == "horovod" and (name.startswith(("HOROVOD_", "NCCL_")) or name == "TF_CPP_MIN_LOG_LEVEL")))


@pytest.mark.parametrize("sandbox", [
    pytest.param("auto", marks=pytest.mark.skipif(local_sandbox.unavailable() is not None, reason="no sandbox here")),
    "off"])
@pytest.mark.parametrize("framework", ["generic", pytest.param("horovod", marks=needs_horovod)])
def test_no_worker_nor_its_launcher_can_read_the_task_processs_secrets(tmp_path, monkeypatch, framework, sandbox):
    """Unsandboxed the worker reads its ancestors' environments up to the launcher; in its sandbox it
    cannot even see the launcher (its own PID namespace)."""
    for name, value in TASK_SECRETS.items():
        monkeypatch.setenv(name, value)
    backend = LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), sandbox=sandbox)
    spec = TrainingJobSpec(framework=framework, command=["python", "-c", WORKER], num_workers=2,
                           env={"JOB_SETTING": "visible"})
    umask = os.umask(0)  # the records are private whatever the umask
    try:
        assert backend.submit("env", spec, {}, secrets=dict([EXPLICIT]))
    finally:
        os.umask(umask)
    status = wait_for(lambda: (s := backend.status("env")).state.is_terminal and s, what="the job")
    job_dir = backend.job_dir("env")
    log = (job_dir / "output.log").read_text()
    assert status.state is JobState.SUCCEEDED, log

    for name, value in TASK_SECRETS.items():
        assert value not in log, f"{name} reached a process of the job"
    reports = [report for line in backend.log_source("env").read().lines if line.text.startswith("{")
               and "environ" in (report := json.loads(line.text))]  # (not the launcher's resources samples)
    assert len(reports) == 2
    launcher = str(json.loads((job_dir / "launcher.json").read_text())["pid"])
    for report in reports:
        for ancestor in report["chain"].values():
            assert not set(TASK_SECRETS) & set(ancestor), "an ancestor of the worker holds the task's secrets"
        environ = report["environ"]
        assert environ["JOB_SETTING"] == "visible" and environ[EXPLICIT[0]] == "<present>"
        assert environ["PATH"].startswith(f"{TRAINING_IMAGE}/bin{os.pathsep}")
        assert not {name for name in environ if not permitted(name, framework, sandbox)}, "not an allow-listed variable"
        if sandbox == "off":
            assert launcher in report["chain"], "the worker's ancestry up to the launcher was read"
            assert EXPLICIT[0] not in report["chain"][launcher], "the launcher gets explicit secrets on stdin only"
            assert not {name for name in report["chain"][launcher] if not permitted(name, framework)}
        else:
            assert launcher not in report["chain"], "in its sandbox, its own ancestry only"

    records = sorted(job_dir.iterdir())
    assert {path.name for path in records} >= {"job.json", "launcher.json", "status.json", "output.log",
                                               "heartbeat", "launcher.log"}
    assert stat.S_IMODE(job_dir.stat().st_mode) == 0o700
    for path in records:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, f"{path.name} is not private"
        assert EXPLICIT[1] not in path.read_text(errors="replace"), f"the explicit secret was written to {path.name}"
