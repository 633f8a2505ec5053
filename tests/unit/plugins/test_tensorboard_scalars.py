"""The training view's TensorBoard reader (plugins.tensorboard_scalars) on real event files, written by
tensorboard's own event-file writer: the scalars at their steps, bounded in tags, points and files, no link
followed (the directory or a file a job replaced with one), a tag holding markup shown as text; and every
backend hands its jobs the directory (AIRFLOW_ML_TENSORBOARD_DIR) inside their checkpoint directory."""

from __future__ import annotations

import os
import time
from html import escape
from pathlib import Path

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from airflow_ml_provider.artifact_layout import TENSORBOARD_ENV, job_dirs, tensorboard_dir
from airflow_ml_provider.jobs.backends.kubernetes.pod_template import job_env
from airflow_ml_provider.jobs.backends.local.launcher import launch_plan
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.plugins import tensorboard_scalars
from airflow_ml_provider.plugins.tensorboard_scalars import MAX_POINTS, MAX_TAGS, read_scalars
from airflow_ml_provider.plugins.training_view import page

HOSTILE = "<script>alert(1)</script>"


def write_events(logdir: Path, points: dict[str, list[tuple[int, float]]]) -> None:
    writer = EventFileWriter(str(logdir))
    for tag, series in points.items():
        for step, value in series:
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
            writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))
    writer.close()


def test_the_scalars_of_a_directory_at_their_steps(tmp_path):
    write_events(tmp_path / "tb", {"loss": [(1, 0.5), (2, 0.25)], "auc": [(1, 0.75)]})
    found = read_scalars(str(tmp_path / "tb"))
    assert found == {"dir": str(tmp_path / "tb"), "note": None,
                     "scalars": {"loss": [[1, 0.5], [2, 0.25]], "auc": [[1, 0.75]]}}
    assert read_scalars(str(tmp_path / "none"))["note"] == "no event files yet"
    write_events(tmp_path / "tb", {"loss": [(3, 0.125)]})  # a resumed attempt's file: the kept parse is not reused
    assert read_scalars(str(tmp_path / "tb"))["scalars"]["loss"] == [[1, 0.5], [2, 0.25], [3, 0.125]]


def test_tags_points_and_files_are_bounded(tmp_path, monkeypatch):
    write_events(tmp_path / "tb", {f"t{i:02d}": [(1, 1.0)] for i in range(MAX_TAGS + 5)}
                 | {"many": [(step, 1.0) for step in range(1, 3 * MAX_POINTS)]})
    scalars = read_scalars(str(tmp_path / "tb"))["scalars"]
    assert len(scalars) == MAX_TAGS and all(len(points) <= MAX_POINTS for points in scalars.values())
    monkeypatch.setattr(tensorboard_scalars, "MAX_FILES", 1)
    write_events(tmp_path / "two", {"a": [(1, 1.0)]})
    time.sleep(0.01)
    write_events(tmp_path / "two", {"a": [(2, 2.0)]})
    found = read_scalars(str(tmp_path / "two"))
    assert found["scalars"] == {"a": [[2, 2.0]]} and found["note"].startswith("1 event file(s) not read"), found


def test_no_link_is_followed(tmp_path):
    """A job replaced its TensorBoard directory, or one of its event files, with a link to files it may not
    show: neither is read."""
    write_events(tmp_path / "elsewhere", {"secret": [(1, 42.0)]})
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "tensorboard").symlink_to(tmp_path / "elsewhere")
    found = read_scalars(str(tmp_path / "ckpt" / "tensorboard"))
    assert found["scalars"] == {} and found["note"].startswith("not read"), found
    os.mkdir(tmp_path / "tb")
    [event_file] = (tmp_path / "elsewhere").iterdir()
    (tmp_path / "tb" / event_file.name).symlink_to(event_file)
    assert read_scalars(str(tmp_path / "tb"))["scalars"] == {}


def test_a_tag_holding_markup_is_shown_as_text(tmp_path):
    write_events(tmp_path / "tb", {HOSTILE: [(1, 1.0), (2, 2.0)]})
    data = {"ti": {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1, "state": "success"},
            "view": {}, "result": None, "targets": {}, "links": [], "tensorboard": read_scalars(str(tmp_path / "tb"))}
    html = page(data)
    assert escape(HOSTILE) + " (TensorBoard)" in html and HOSTILE not in html
    assert f"tensorboard --logdir {tmp_path / 'tb'}" in html


def test_every_backend_hands_the_job_its_tensorboard_directory(tmp_path):
    dirs = job_dirs("s3://bucket/ml/artifacts/aml-x")
    spec = TrainingJobSpec(framework="generic", command=["python", "-c", "pass"], num_workers=1, **dirs)
    expected = "s3://bucket/ml/artifacts/aml-x/checkpoints/tensorboard"
    assert tensorboard_dir(spec.checkpoint_dir) == expected
    assert {"name": TENSORBOARD_ENV, "value": expected} in job_env(spec)
    local = TrainingJobSpec(framework="generic", command=["python", "-c", "pass"], num_workers=1, **job_dirs(str(tmp_path / "aml-x")))
    plan = launch_plan(local, str(tmp_path / "image"), tmp_path / "job")
    assert plan["env"][TENSORBOARD_ENV] == str(tmp_path / "aml-x" / "checkpoints" / "tensorboard")
    bare = TrainingJobSpec(framework="generic", command=["python", "-c", "pass"], num_workers=1)
    assert TENSORBOARD_ENV not in {item["name"] for item in job_env(bare)}
