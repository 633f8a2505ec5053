"""How a local job ends when something other than its workers goes wrong, with real processes: the
launcher cannot run it, two submitters race, its deadline passes, its owner is SIGKILLed, or the
submitter dies mid-submit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from airflow_ml_provider.jobs.backends.base import JobSubmissionError
from airflow_ml_provider.jobs.backends.local.backend import LocalBackend, job_processes
from airflow_ml_provider.jobs.backends.local.common import JOB_UID_ENV
from airflow_ml_provider.jobs.spec import Framework, TrainingJobSpec
from airflow_ml_provider.jobs.state import NEVER_LAUNCHED, JobState
from support import REPO, TRAINING_IMAGE, final_status, job_log, job_uid, needs_sandbox, wait_for

pytestmark = pytest.mark.integration

SLEEP = ["python", "-c", "import time; print('ready', flush=True); time.sleep(600)"]


@pytest.fixture
def backend(tmp_path) -> LocalBackend:
    return LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=2)


def unvalidated(**fields) -> TrainingJobSpec:
    """A spec the launcher must cope with whether or not spec validation would catch it first."""
    return TrainingJobSpec.model_construct(**{"num_workers": 1, "framework": Framework.GENERIC, **fields})


def assert_stopped(backend: LocalBackend, name: str) -> None:
    """Once a job reads as ended only its launcher may remain (it exits right after writing the status)."""
    launcher = json.loads((backend.job_dir(name) / "launcher.json").read_text())["pid"]
    assert {proc.pid for proc in job_processes(job_uid(backend, name))} <= {launcher}
    wait_for(lambda: not job_processes(job_uid(backend, name)), timeout=10, what="the launcher to exit")


@pytest.mark.parametrize(("case", "fields", "error"), [
    ("nul-argv", {"command": ["python", "-c", "print('a\0b')"]}, "command: argument 2 (\"print('a\"...) contains a NUL byte"),
    ("nul-env", {"command": ["python", "-V"], "env": {"TOKEN": "a\0b"}}, "env: variable 'TOKEN' contains a NUL byte"),
])
def test_a_job_the_launcher_cannot_run_fails_once_with_the_launchers_error(backend, tmp_path, case, fields, error):
    (tmp_path / "a-file").write_text("not a directory")
    fields = {k: v.format(tmp=tmp_path) if k == "model_dir" else v for k, v in fields.items()}
    assert backend.submit(case, unvalidated(**fields), {}) is True
    status = final_status(backend, case)
    assert status.state is JobState.FAILED, "a launcher error is the job's failure, never a preemption to resubmit"
    assert status.message.startswith("the launcher could not run the job: ") and error in status.message
    assert f"[launcher] job ended: FAILED {status.message}" in job_log(backend, case)
    assert_stopped(backend, case)


@pytest.mark.parametrize("sandbox", [pytest.param("auto", marks=needs_sandbox), "off"])
def test_a_model_dir_that_cannot_be_made_fails_the_job_naming_the_field(tmp_path, sandbox):
    """Sandboxed, the submitter makes the job's directories for the attempt, so it refuses one it cannot make
    before anything starts; unsandboxed, the launcher makes them and fails the job with its error."""
    (tmp_path / "a-file").write_text("not a directory")
    backend = LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=2, sandbox=sandbox)
    job = unvalidated(command=["python", "-V"], model_dir=f"{tmp_path}/a-file/model")
    if sandbox == "auto":
        with pytest.raises(JobSubmissionError, match=rf"model_dir: {tmp_path}/a-file is not a directory"):
            backend.submit("model-dir", job, {})
        assert not backend.job_dir("model-dir").exists()
        return
    assert backend.submit("model-dir", job, {}) is True
    status = final_status(backend, "model-dir")
    assert status.state is JobState.FAILED and "the launcher could not run the job: model_dir: cannot create" in status.message
    assert_stopped(backend, "model-dir")


_SUBMITTER = textwrap.dedent("""
    import pathlib, sys, time
    from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
    from airflow_ml_provider.jobs.spec import TrainingJobSpec
    root, image, role = sys.argv[1:4]
    jobs, signals = pathlib.Path(root, "jobs"), pathlib.Path(root).parent
    if role == "first":  # pauses right before archiving the finished job, until the other has started one
        rename, finished = pathlib.Path.rename, (jobs / "race" / "job.json").read_text()

        def paused_rename(self, target):
            (signals / "first-is-archiving").touch()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and (jobs / "race" / "job.json").read_text() == finished:
                time.sleep(0.01)
            return rename(self, target)

        pathlib.Path.rename = paused_rename
    else:
        while not (signals / "first-is-archiving").exists():
            time.sleep(0.005)
    spec = TrainingJobSpec(framework="generic", num_workers=1,
                           command=["python", "-c", "import time; print('ready', flush=True); time.sleep(600)"])
    print(LocalBackend(root, image=image, cancel_grace_s=2).submit("race", spec, {}), flush=True)
""")


def test_concurrent_submitters_after_a_finished_job_start_exactly_one_and_the_others_attach(backend):
    """Two submitting processes find the same finished job; the first is held right before it archives
    it until the second has had every chance to archive and start a job of its own (or 5 s)."""
    backend.submit("race", TrainingJobSpec(framework="generic", command=["python", "-V"], num_workers=1), {})
    assert final_status(backend, "race").state is JobState.SUCCEEDED
    submitters = [subprocess.Popen([sys.executable, "-c", _SUBMITTER, str(backend.root), str(TRAINING_IMAGE), role],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for role in ("first", "second")]
    outcomes = [proc.communicate(timeout=120) for proc in submitters]
    assert sorted(out.strip() for out, _ in outcomes) == ["False", "True"], outcomes
    assert sorted(p.name for p in (backend.root / "jobs").iterdir()) == ["race", "race.1"], \
        "the finished job archived once; no running job hidden under another name"
    wait_for(lambda: "ready" in job_log(backend, "race"), what="the new job")
    assert backend.status("race").state is JobState.RUNNING
    backend.cancel("race")
    assert backend.status("race").state is JobState.CANCELLED and not job_processes(job_uid(backend, "race"))


def test_a_job_past_its_deadline_is_stopped_and_fails_naming_the_deadline(backend):
    spec = TrainingJobSpec(framework="generic", command=SLEEP, num_workers=2, timeout_s=10)
    backend.submit("deadline", spec, {})
    wait_for(lambda: job_log(backend, "deadline").count("ready") == 2, what="both workers")
    status = final_status(backend, "deadline", timeout=60)
    assert status.state is JobState.FAILED
    assert status.message == "deadline of 10 s exceeded (timeout_s)"
    assert "[launcher] stopping the job: deadline of 10 s exceeded" in job_log(backend, "deadline")
    assert_stopped(backend, "deadline")


_FOLLOWER = textwrap.dedent("""
    import sys, time
    from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
    from airflow_ml_provider.jobs.spec import Framework, TrainingJobSpec
    root, image = sys.argv[1:3]
    backend = LocalBackend(root, image=image, cancel_grace_s=2, orphan_grace_s=3)
    spec = TrainingJobSpec(framework="generic", num_workers=2,
                           command=["python", "-c", "import time; print('ready', flush=True); time.sleep(600)"])
    backend.submit("orphan", spec, {})
    while True:  # what every follower does at each poll
        backend.heartbeat("orphan")
        print(backend.status("orphan").state.value, flush=True)
        time.sleep(0.5)
""")


def test_a_job_whose_owning_task_was_sigkilled_is_stopped_after_the_orphan_grace(backend):
    owner = subprocess.Popen([sys.executable, "-c", _FOLLOWER, str(backend.root), str(TRAINING_IMAGE)],
                             stdout=subprocess.DEVNULL)
    try:
        wait_for(lambda: job_log(backend, "orphan").count("ready") == 2, what="both workers")
        time.sleep(5)  # longer than orphan_grace_s: a heartbeating owner keeps its job
        assert backend.status("orphan").state is JobState.RUNNING
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    status = final_status(backend, "orphan", timeout=60)
    assert status.state is JobState.CANCELLED
    assert status.message.startswith("no follower for 3 s: the owning task is gone")
    assert_stopped(backend, "orphan")


_KILLED_SUBMITTER = textwrap.dedent("""
    import os, signal, sys
    from airflow_ml_provider.jobs.backends.local import backend as local
    from airflow_ml_provider.jobs.spec import Framework, TrainingJobSpec
    root, image, when = sys.argv[1:4]

    def die():  # SIGKILL of the submitting task, at a chosen point of the submission
        os.kill(os.getpid(), signal.SIGKILL)

    if when == "before-launcher":
        real_write = local.write_json
        local.write_json = lambda path, data: (real_write(path, data), path.name == "job.json" and die())
    else:
        start_launcher = local.launcher_server.start_launcher

        def started(*args, **kwargs):  # the launcher forked, its secrets not yet written
            start_launcher(*args, **kwargs)
            die()
        local.launcher_server.start_launcher = started
    spec = TrainingJobSpec(framework="generic", num_workers=1,
                           command=["python", "-c", "print('the job ran', flush=True)"])
    local.LocalBackend(root, image=image).submit("interrupted", spec, {})
""")


@pytest.mark.parametrize("when", ["before-launcher", "after-launcher-started"])
def test_a_submitter_killed_mid_submit_leaves_nothing_running_and_a_retry_starts_afresh(backend, when):
    code = subprocess.run([sys.executable, "-c", _KILLED_SUBMITTER, str(backend.root), str(TRAINING_IMAGE), when],
                          cwd=REPO).returncode
    assert code == -signal.SIGKILL
    status = final_status(backend, "interrupted", timeout=30)
    assert status.state is JobState.FAILED
    assert status.message == "the job was never launched: its submitter died mid-submit"
    assert status.reason == NEVER_LAUNCHED  # what callers act on (a search submits the trial again)
    # the launcher writes that status, then exits (seconds later at CI load); once nothing of the job runs,
    # nothing can print later either
    wait_for(lambda: not job_processes(job_uid(backend, "interrupted")), timeout=60, what="the launcher to exit")
    assert "the job ran" not in job_log(backend, "interrupted")
    assert backend.submit("interrupted", TrainingJobSpec(framework="generic", command=["python", "-V"],
                                                         num_workers=1), {}) is True
    assert final_status(backend, "interrupted").state is JobState.SUCCEEDED


_PAUSED_SUBMITTER = textwrap.dedent("""
    import os, signal, sys
    from airflow_ml_provider.jobs.backends.local import backend as local
    from airflow_ml_provider.jobs.spec import TrainingJobSpec
    root, image = sys.argv[1:3]

    start_launcher = local.launcher_server.start_launcher

    def paused(*args, **kwargs):  # its record written, its launcher not started
        os.kill(os.getpid(), signal.SIGSTOP)
        return start_launcher(*args, **kwargs)
    local.launcher_server.start_launcher = paused
    spec = TrainingJobSpec(framework="generic", num_workers=1,
                           command=["python", "-c", "import time; print('the job ran', flush=True); time.sleep(60)"])
    local.LocalBackend(root, image=image).submit("early", spec, {})
""")


def test_a_job_cancelled_before_its_launcher_started_never_runs(backend):
    """A cancel that lands while the submitter is still starting the launcher finds no process of the job
    (they are found by their environment): before the fix, the launcher then ran the whole job, which read
    as CANCELLED all along."""
    import psutil

    submitter = subprocess.Popen([sys.executable, "-c", _PAUSED_SUBMITTER, str(backend.root), str(TRAINING_IMAGE)],
                                 cwd=REPO)
    try:
        wait_for(lambda: psutil.Process(submitter.pid).status() == psutil.STATUS_STOPPED, timeout=60,
                 what="the submitter to pause before starting the launcher")
        assert not job_processes(job_uid(backend, "early")), "nothing of the job may run yet"
        backend.cancel("early", "stopped by its task")
    finally:
        submitter.send_signal(signal.SIGCONT)
    assert submitter.wait(timeout=60) == 0
    wait_for(lambda: (backend.job_dir("early") / "status.json").exists(), timeout=60, what="the launcher's status")
    status = backend.status("early")
    assert (status.state, status.message) == (JobState.CANCELLED, "stopped by its task")
    assert_stopped(backend, "early")
    log = job_log(backend, "early")
    assert "the job ran" not in log
    assert "[launcher] job ended: CANCELLED stopped by its task" in log


def test_a_launcher_whose_submitter_died_never_ends_the_job_a_retry_started_under_the_name(backend):
    """A task retried at once (CI saw 13 ms) archives the job its killed submitter left and starts a new one
    under the name; the killed submitter's launcher, still starting, then learned its submitter died and
    wrote "never launched" into the directory by its name, now the new job's, which read as FAILED. Here
    that launcher learns it (its stdin at EOF) only once the new job runs."""
    code = subprocess.run([sys.executable, "-c", _KILLED_SUBMITTER, str(backend.root), str(TRAINING_IMAGE),
                           "before-launcher"], cwd=REPO).returncode
    assert code == -signal.SIGKILL
    job_dir, first_uid = backend.job_dir("interrupted"), job_uid(backend, "interrupted")
    assert backend.submit("interrupted", TrainingJobSpec(framework="generic", command=SLEEP, num_workers=1), {})
    wait_for(lambda: "ready" in job_log(backend, "interrupted"), what="the new job to start")
    late = subprocess.run([sys.executable, "-m", "airflow_ml_provider.jobs.backends.local.launcher", str(job_dir)],
                          env={**os.environ, JOB_UID_ENV: first_uid}, cwd=REPO, stdin=subprocess.DEVNULL, timeout=60)
    assert late.returncode == 0
    assert backend.status("interrupted").state is JobState.RUNNING, backend.status("interrupted")
    backend.cancel("interrupted")
    assert_stopped(backend, "interrupted")
