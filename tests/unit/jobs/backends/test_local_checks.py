"""The local backend's checks that need no job: names, secrets, the environment allow-list, the plan."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_ml_provider.jobs.backends.base import JobSubmissionError
from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.backends.local.common import allowed_env
from airflow_ml_provider.jobs.backends.local.launcher import (
    HOROVODRUN_MAIN,
    horovod_output,
    launch_plan,
    rank_shim,
)
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from support import TRAINING_IMAGE, needs_horovod

SPEC = TrainingJobSpec(framework="generic", command=["python", "t.py"], num_workers=1)


@pytest.mark.parametrize("name", ["../etc", "a/b", ".hidden", "", "a..b", "x" * 300])
def test_a_job_name_that_is_not_one_directory_name_is_refused(tmp_path, name):
    with pytest.raises(ValueError, match="job name: .* is not a valid local job name"):
        LocalBackend(tmp_path).job_dir(name)


def test_only_allow_listed_variables_pass():
    environ = {"PATH": "/bin", "HOME": "/root", "LANG": "C.UTF-8", "LC_ALL": "C", "TZ": "UTC", "USER": "u",
               "AIRFLOW_CONN_DB": "x", "AIRFLOW__CORE__FERNET_KEY": "x", "AWS_SECRET_ACCESS_KEY": "x",
               "MLFLOW_TRACKING_TOKEN": "x", "LD_PRELOAD": "/tmp/evil.so", "PYTHONPATH": "/tmp"}
    assert allowed_env(environ) == {"PATH": "/bin", "HOME": "/root", "LANG": "C.UTF-8", "LC_ALL": "C",
                                    "TZ": "UTC", "USER": "u"}


@pytest.mark.parametrize(("secrets", "error"), [
    ({"BAD NAME": "v"}, "secrets: 'BAD NAME' is not a valid environment variable name"),
    ({"KEY": "a\0b"}, "secrets: the value of KEY must be a string without NUL bytes"),
    ({"KEY": 3}, "secrets: the value of KEY must be a string"),
])
def test_bad_secrets_are_refused_without_showing_the_value(tmp_path, secrets, error):
    with pytest.raises(JobSubmissionError) as caught:
        LocalBackend(tmp_path, image=sys.prefix).submit("j", SPEC, {}, secrets=secrets)
    assert str(caught.value).startswith(error) and "a\0b" not in str(caught.value)
    assert not (tmp_path / "jobs" / "j").exists()


def test_a_horovod_program_starting_with_a_dash_is_refused_at_submit(tmp_path):
    spec = TrainingJobSpec(framework="horovod", command=["-H", "evil:8", "python"], num_workers=2)
    with pytest.raises(ValueError, match="command: the program '-H' starts with '-'"):
        launch_plan(spec, sys.prefix, tmp_path / "j")
    image = tmp_path / "img"
    (image / "bin").mkdir(parents=True)
    (image / "bin" / "horovodrun").touch()
    with pytest.raises(JobSubmissionError, match="starts with '-'"):
        LocalBackend(tmp_path / "ml", image=str(image)).submit("j", spec, {})
    assert not (tmp_path / "ml" / "jobs" / "j").exists()


def test_the_plan_runs_each_rank_under_the_output_shim_under_horovodrun_with_the_images_bin_first():
    spec = TrainingJobSpec(framework="horovod", command=["python", "t.py"], num_workers=2, env={"A": "1"},
                           timeout_s=60)
    plan = launch_plan(spec, "/img", Path("/jobs/j"))
    assert plan["argv"] == ["/img/bin/python", str(HOROVODRUN_MAIN), "-np", "2", "-H", "localhost:2",
                            "--start-timeout", "120", "--gloo",
                            "--network-interface", "lo", "--disable-cache", *rank_shim(), "python", "t.py"]
    assert plan["env"]["PATH"].split(os.pathsep)[0] == "/img/bin" and plan["env"]["A"] == "1"


def test_orphan_grace_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match=r"orphan_grace_s: must be a positive number of seconds \(got 0\)"):
        LocalBackend(tmp_path, orphan_grace_s=0)


def test_horovodruns_report_of_a_ranks_end_is_read_even_with_another_line_on_it():
    """horovodrun prints the report and its newline in two writes; a rank's line can land in between."""
    assert horovod_output("[1]<stdout>:epoch 3") == [("rank 1", "epoch 3", None)]
    assert horovod_output("Process 1 exit with status code 7.") == [
        ("horovodrun", "Process 1 exit with status code 7.", (1, 7))]
    assert horovod_output("Process 1 exit with status code 7.Process 0 exit with status code 143.[0]<stderr>:bye") == [
        ("horovodrun", "Process 1 exit with status code 7.", (1, 7)),
        ("horovodrun", "Process 0 exit with status code 143.", (0, 143)),
        ("rank 0", "bye", None)]
    assert horovod_output("[0]<stdout>:Process 1 exit with status code 0.") == [
        ("rank 0", "Process 1 exit with status code 0.", None)], "a rank cannot forge horovodrun's report"
    assert horovod_output("") == [("horovodrun", "", None)]


def test_the_sandbox_hides_the_parent_of_the_jobs_own_directory_and_refuses_a_dir_that_would_show_a_secret():
    """Only the job's writable directories themselves are bound (mount points no job can replace)."""
    from airflow_ml_provider.jobs.backends.local.sandbox import mounts

    got = mounts("job-1", ["/srv/airflow"], [("model_dir", "/data/ml/artifacts/job-1/model")], ["/data/ml/data"],
                 uid=None)
    assert got == {"hide": ["/data/ml/artifacts", "/srv/airflow"], "writable": ["/data/ml/artifacts/job-1/model"],
                   "readable": ["/data/ml/data"], "uid": None}
    assert mounts("tmp", [], [("model_dir", "/tmp/m")], [], uid=None)["hide"] == [], "never / or a top-level directory"
    with pytest.raises(ValueError, match=r"model_dir: '/srv' contains /srv/airflow, which a job must not see"):
        mounts("job-1", ["/srv/airflow"], [("model_dir", "/srv")], [], uid=None)


def test_a_job_of_its_own_user_gets_the_directories_it_cannot_enter_on_the_way_to_its_inputs_hidden(tmp_path):
    """A job's own uid cannot pass a 0700 directory (a Python under /root): it is hidden, and what the job needs
    inside is bound back; a writable directory reached through a link is refused naming the field."""
    from airflow_ml_provider.jobs.backends.local.sandbox import mounts

    closed = tmp_path / "closed"
    (closed / "python").mkdir(parents=True)
    closed.chmod(0o700)
    tmp_path.chmod(0o755)
    got = mounts("job-1", [], [], [str(closed / "python")], uid=1_500_000_001)
    assert str(closed) in got["hide"] and got["readable"] == [str(closed / "python")] and got["uid"] == 1_500_000_001
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")  # root's own link (a mounted volume's, say): followed
    assert mounts("job-1", [], [("model_dir", str(tmp_path / "link" / "model"))], [], uid=None)["writable"] == [
        str(tmp_path / "real" / "model")]
    if os.geteuid() == 0:  # a link of another user's (a job's) is refused
        os.lchown(tmp_path / "link", 1_500_000_123, 1_500_000_123)
        with pytest.raises(ValueError, match=r"model_dir: '.*/link/model' goes through the symbolic link .*/link"):
            mounts("job-1", [], [("model_dir", str(tmp_path / "link" / "model"))], [], uid=None)


@needs_horovod
@pytest.mark.parametrize(("record", "answered", "warning"), [
    ('{"horovod": "0.28.1", "gloo": true}', True, None),
    (None, False, None),  # an environment made without the record: probed, as horovodrun always does
    ('{"horovod": "0.27.0", "gloo": true}', False, "is for horovod '0.27.0', not the installed 0.28.1"),
    ('{"horovod": "0.28.1", "gloo": "yes"}', False, "does not say that Horovod was built with Gloo"),
    ("not json", False, "cannot be read (JSONDecodeError)"),
])
def test_horovodrun_skips_its_build_probe_only_on_a_record_of_the_installed_horovod(tmp_path, record, answered,
                                                                                    warning):
    if record is not None:
        (tmp_path / "record.json").write_text(record)
    check = (f"import runpy, pathlib; recorded_gloo = runpy.run_path({str(HOROVODRUN_MAIN)!r})['recorded_gloo']; "
             f"recorded_gloo.__globals__['BUILD_RECORD'] = pathlib.Path({str(tmp_path / 'record.json')!r}); "
             "print(recorded_gloo())")
    done = subprocess.run([str(TRAINING_IMAGE / "bin" / "python"), "-c", check], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.split() == [str(answered)], done.stderr
    if warning is None:  # a record that answers, or none: nothing to say
        assert "build record" not in done.stderr, done.stderr
    else:  # a record that cannot answer costs every run the probe: the job's log says which and why
        assert f"the build record {tmp_path / 'record.json'} {warning}; probing the build instead" in done.stderr


@pytest.mark.parametrize(("limits", "error"), [
    ({"memory_mb": 0}, r"local_job_memory_mb: must be a whole number of at least 1 \(got 0\)"),
    ({"max_processes": True}, r"local_job_max_processes: must be a whole number"),
    ({"egress": ("10.0.0.5:9000",)}, r"local_job_egress: '10.0.0.5:9000': an address outside loopback cannot"),
    ({"egress": ("no-port",)}, r"local_job_egress: 'no-port' is not host:port"),
])
def test_sandbox_limits_refuse_what_cannot_bound_or_reach_naming_the_setting(limits, error):
    from airflow_ml_provider.jobs.backends.local.sandbox import SandboxLimits

    with pytest.raises(ValueError, match=error):
        SandboxLimits(**limits)
