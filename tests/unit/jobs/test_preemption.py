"""Resubmission after a preemption: the resume point from the log, and the attempt's env and labels."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from airflow_ml_provider.jobs.backends.local.launcher import launch_plan
from airflow_ml_provider.jobs.drivers import replay
from airflow_ml_provider.jobs.follow import FollowOptions, ResumePoint
from airflow_ml_provider.jobs.preemption import PREEMPTIONS_ENV, RESUME_ENV, resubmission
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.labels import PREEMPTIONS as PREEMPTIONS_LABEL
from airflow_ml_provider.logs.files import FileLogSource

SPEC = TrainingJobSpec(framework="horovod", command=["python", "t.py"], num_workers=2, env={"A": "1"})


def test_the_last_checkpoint_event_in_the_log_is_the_resume_point(tmp_path):
    log = tmp_path / "output.log"
    log.write_text(
        '[rank 0] {"event": "checkpoint", "epoch": 1, "step": 22, "path": "/c/ckpt-000001.npz"}\n'
        "[rank 1] plain line\n"
        '[rank 0] {"event": "checkpoint", "epoch": 2, "step": 44, "path": "/c/ckpt-000002.npz"}\n'
        '[rank 0] {"event": "metrics", "step": 3, "loss": 0.1}\n'
    )
    checkpoint = replay(FileLogSource(log), FollowOptions(artifact_roots=("/c",))).tracker.checkpoint
    assert checkpoint == {"path": "/c/ckpt-000002.npz", "step": 44, "epoch": 2}
    point = ResumePoint(**checkpoint)
    assert point.describe() == "checkpoint /c/ckpt-000002.npz at step 44, epoch 2"


def test_a_log_without_checkpoints_has_no_resume_point(tmp_path):
    (tmp_path / "output.log").write_text("[rank 0] hello\n")
    assert replay(FileLogSource(tmp_path / "output.log")).tracker.checkpoint is None


def test_the_attempt_counts_preemptions_in_env_and_labels_and_points_at_the_checkpoint():
    spec, labels = resubmission(SPEC, {"x": "y"}, 2, ResumePoint("/c/ckpt-000002.npz", 44, 2))
    assert spec.env == {"A": "1", PREEMPTIONS_ENV: "2", RESUME_ENV: "/c/ckpt-000002.npz"}
    assert labels == {"x": "y", PREEMPTIONS_LABEL: "2"}
    spec, _ = resubmission(SPEC, {}, 1, None)
    assert RESUME_ENV not in spec.env and spec.env[PREEMPTIONS_ENV] == "1"


def test_an_elastic_local_plan_runs_horovodrun_with_bounds_and_the_etcd_discovery(tmp_path):
    spec = TrainingJobSpec(framework="horovod", command=["python", "t.py"], num_workers=2, min_workers=1,
                           max_workers=4)
    argv = launch_plan(spec, sys.prefix, tmp_path / "job-a", "http://127.0.0.1:2379")["argv"]
    assert argv[2:5] == ["-np", "2", "--min-np"] and argv[5:8] == ["1", "--max-np", "4"]
    assert "-H" not in argv
    discovery = shlex.split(argv[argv.index("--host-discovery-script") + 1])
    assert discovery[1:] == ["-m", "airflow_ml_provider.runtime.local_discovery", "--etcd", "http://127.0.0.1:2379",
                             "--job", "job-a"]
    assert argv[argv.index("--gloo-timeout-seconds") + 1] == "120"  # as on Kubernetes (jobs.horovodrun)
    fixed = launch_plan(SPEC, sys.prefix, Path("/j"))["argv"]
    assert fixed[2:6] == ["-np", "2", "-H", "localhost:2"]
