"""The training view's TensorBoard reader (plugins.tensorboard_scalars) on real event files, written by
tensorboard's own event-file writer: the scalars at their steps, bounded in tags, points and files, no link
followed (the directory or a file a job replaced with one), a tag holding markup shown as text; and every
backend hands its jobs the directory (AIRFLOW_ML_TENSORBOARD_DIR) inside their checkpoint directory."""

from __future__ import annotations

import os
import subprocess
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
from support import TRAINING_PYTHON, needs_training_env

HOSTILE = "<script>alert(1)</script>"
HOSTILE_RUN = "<img src=x onerror=alert(1)>"  # a folder name holds no slash


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
                     "runs": {".": {"loss": [[1, 0.5], [2, 0.25]], "auc": [[1, 0.75]]}}}
    assert read_scalars(str(tmp_path / "none"))["note"] == "no event files yet"
    write_events(tmp_path / "tb", {"loss": [(3, 0.125)]})  # a resumed attempt's file: the kept parse is not reused
    assert read_scalars(str(tmp_path / "tb"))["runs"]["."]["loss"] == [[1, 0.5], [2, 0.25], [3, 0.125]]


def test_tags_points_and_files_are_bounded(tmp_path, monkeypatch):
    write_events(tmp_path / "tb", {f"t{i:02d}": [(1, 1.0)] for i in range(MAX_TAGS + 5)}
                 | {"many": [(step, 1.0) for step in range(1, 3 * MAX_POINTS)]})
    scalars = read_scalars(str(tmp_path / "tb"))["runs"]["."]
    assert len(scalars) == MAX_TAGS and all(len(points) <= MAX_POINTS for points in scalars.values())
    monkeypatch.setattr(tensorboard_scalars, "MAX_FILES", 1)
    write_events(tmp_path / "two", {"a": [(1, 1.0)]})
    time.sleep(0.01)
    write_events(tmp_path / "two", {"a": [(2, 2.0)]})
    found = read_scalars(str(tmp_path / "two"))
    assert found["runs"] == {".": {"a": [[2, 2.0]]}} and found["note"].startswith("1 event file(s) or run folder(s) not read"), found


def test_no_link_is_followed(tmp_path):
    """A job replaced its TensorBoard directory, or one of its event files, with a link to files it may not
    show: neither is read."""
    write_events(tmp_path / "elsewhere", {"secret": [(1, 42.0)]})
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "tensorboard").symlink_to(tmp_path / "elsewhere")
    found = read_scalars(str(tmp_path / "ckpt" / "tensorboard"))
    assert found["runs"] == {} and found["note"].startswith("not read"), found
    os.mkdir(tmp_path / "tb")
    [event_file] = (tmp_path / "elsewhere").iterdir()
    (tmp_path / "tb" / event_file.name).symlink_to(event_file)
    assert read_scalars(str(tmp_path / "tb"))["runs"] == {}


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


TENSORBOARDX_WRITES = ("import sys\nfrom tensorboardX import SummaryWriter\n"
                       "for run, value in zip(sys.argv[2::2], sys.argv[3::2]):\n"
                       "    w = SummaryWriter(sys.argv[1] + '/' + run if run != '.' else sys.argv[1])\n"
                       "    [w.add_scalar('loss', float(value) / step, step) for step in (1, 2)]\n"
                       "    w.close()\n")


@needs_training_env
def test_runs_one_folder_deep_drawn_in_one_chart_per_tag_and_no_linked_run_read(tmp_path):
    """TensorBoard's runs: event files that tensorboardX (the training environment's writer) wrote into the
    directory itself (run "."), into ``train/`` and ``validation/``; a run folder that is a link to other files,
    and a folder two levels deep, are not read. The view draws each tag once, every run's curve in its chart."""
    board, elsewhere = tmp_path / "tb", tmp_path / "elsewhere"
    subprocess.run([str(TRAINING_PYTHON), "-c", TENSORBOARDX_WRITES, str(board), ".", "4", "train", "2",
                    "validation", "1", "deeper/down", "8"], check=True, timeout=120,
                   env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    write_events(elsewhere, {"secret": [(1, 42.0)]})
    (board / "linked").symlink_to(elsewhere)
    found = read_scalars(str(board))
    assert found["runs"] == {".": {"loss": [[1, 4.0], [2, 2.0]]}, "train": {"loss": [[1, 2.0], [2, 1.0]]},
                             "validation": {"loss": [[1, 1.0], [2, 0.5]]}}, found
    assert found["note"] is None
    html = page({"ti": {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1, "state": "success"},
                 "view": {}, "result": None, "targets": {}, "links": [], "tensorboard": found})
    assert html.count('class="title">loss (TensorBoard)<') == 1 and "secret" not in html
    assert all(f">run {run}</text>" in html for run in (".", "train", "validation")), html


def test_a_run_alone_is_named_in_its_title_a_hostile_run_name_is_text_and_runs_are_bounded(tmp_path, monkeypatch):
    write_events(tmp_path / "tb" / HOSTILE_RUN, {"acc": [(1, 0.5)]})
    found = read_scalars(str(tmp_path / "tb"))
    assert found["runs"] == {HOSTILE_RUN: {"acc": [[1, 0.5]]}}
    html = page({"ti": {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1, "state": "success"},
                 "view": {}, "result": None, "targets": {}, "links": [], "tensorboard": found})
    assert f"acc (TensorBoard, run {escape(HOSTILE_RUN)})" in html and HOSTILE_RUN not in html
    for run in ("a", "b", "c"):
        time.sleep(0.01)
        write_events(tmp_path / "many" / run, {f"tag-{run}": [(1, 1.0)]})
    monkeypatch.setattr(tensorboard_scalars, "MAX_RUNS", 2)
    found = read_scalars(str(tmp_path / "many"))
    assert set(found["runs"]) == {"b", "c"} and found["note"].startswith("1 event file(s) or run folder(s)"), found
    monkeypatch.setattr(tensorboard_scalars, "MAX_TAGS", 1)
    monkeypatch.setattr(tensorboard_scalars, "_parsed", {})  # the same files: the kept parse had 2 tags
    assert read_scalars(str(tmp_path / "many"))["runs"] == {"b": {"tag-b": [[1, 1.0]]}}
