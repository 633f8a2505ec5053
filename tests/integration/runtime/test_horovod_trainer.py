"""Horovod Keras 3 trainer on 2 real local ranks (horovodrun, Gloo): synced weights, checkpoints (the newest
3 kept), resume."""

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.horovod]

REPO = Path(__file__).resolve().parents[3]
TRAINING_PYTHON = Path(os.environ.get("AIRFLOW_ML_TRAINING_PYTHON", REPO / ".venv-train/bin/python"))
# horovodrun prefixes each worker line with "[<rank>]<stdout>:".
LINE = re.compile(r"^\[(\d+)\]<stdout>:(\{.*\})$")


# Looks for the built TensorFlow op library without importing TensorFlow (seconds); if it is there but
# does not load, the run itself fails instead of skipping.
FIND_MPI_LIB = (
    "import importlib.util, pathlib; spec = importlib.util.find_spec('horovod'); "
    "assert spec, 'horovod is not installed'; "
    "assert list(pathlib.Path(spec.origin).parent.glob('tensorflow/mpi_lib*.so')), "
    "'horovod was built without TensorFlow (no horovod/tensorflow/mpi_lib*.so)'"
)


def _horovod_missing() -> str | None:
    if not TRAINING_PYTHON.exists():
        return f"training python {TRAINING_PYTHON} does not exist (set AIRFLOW_ML_TRAINING_PYTHON)"
    check = subprocess.run(
        [str(TRAINING_PYTHON), "-c", FIND_MPI_LIB], capture_output=True, text=True, check=False
    )
    if check.returncode:
        return f"no Horovod TensorFlow build in {TRAINING_PYTHON}: {check.stderr.strip().splitlines()[-1]}"
    return None


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    reason = _horovod_missing()
    if reason:
        pytest.skip(reason)
    bin_dir = TRAINING_PYTHON.parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_ML_")}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(REPO),
        OMP_WAIT_POLICY="PASSIVE",
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    work = tmp_path_factory.mktemp("horovod")

    def run(epochs: int) -> list[tuple[int, dict]]:
        """Run 2 ranks to ``epochs``; return ``(rank, event)`` for every structured line, in order."""
        proc = subprocess.run(
            [str(bin_dir / "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo",
             "--network-interface", "lo",
             str(TRAINING_PYTHON), "-m", "airflow_ml_provider.runtime.horovod_keras",
             "--epochs", str(epochs), "--batch-size", "32", "--learning-rate", "0.05", "--seed", "0",
             "--checkpoint-dir", str(work / "ckpt"), "--model-dir", str(work / f"model-{epochs}")],
            env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return [(int(m[1]), json.loads(m[2])) for line in proc.stdout.splitlines() if (m := LINE.match(line))]

    return work, run


@pytest.fixture(scope="module")
def first_run(train):
    work, run = train
    return work, run(3)


def _of(events, name, rank=None):
    return [e for r, e in events if e["event"] == name and (rank is None or r == rank)]


def _assert_ranks_in_sync(events):
    checksums = {r: e["checksum"] for r, e in events if e["event"] == "weights_checksum"}
    assert set(checksums) == {0, 1}
    assert checksums[0] == checksums[1]
    assert all(e["rank"] == r for r, e in events if e["event"] == "weights_checksum")


def test_two_ranks_train_in_sync_and_checkpoint_every_epoch(first_run):
    work, events = first_run
    _assert_ranks_in_sync(events)
    metrics = _of(events, "metrics")
    assert metrics == _of(events, "metrics", rank=0), "only rank 0 reports metrics"
    assert [m["epoch"] for m in metrics] == [1, 2, 3] and not [m for m in metrics if "step" in m]
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    checkpoints = _of(events, "checkpoint", rank=0)
    assert [c["epoch"] for c in checkpoints] == [1, 2, 3]
    assert all(Path(c["path"]).is_file() for c in checkpoints)
    assert not list((work / "ckpt").glob(".tmp-*")), "no partial checkpoint left behind"
    assert _of(events, "resumed") == []
    model = work / "model-3" / "model.keras"
    assert _of(events, "model_saved") == [{"event": "model_saved", "path": str(model)}]
    assert model.stat().st_size > 0
    (result,) = _of(events, "result", rank=0)
    assert result["accuracy"] > 0.8 and result["loss"] > 0


def test_metric_and_checkpoint_lines_name_epoch_and_step_alike(first_run):
    """Issue 25 D6: the metrics line said ``step 1`` for epoch 1 while the checkpoint line said ``epoch 1
    step 218``. Now ``epoch`` is the epoch and ``step`` the optimizer's step in both, as the task log shows
    them, and the epoch positions the metric's series (what MLflow's curve and a search's pruning read)."""
    from airflow_ml_provider.logs.display import format_line
    from airflow_ml_provider.logs.metrics import MetricsTracker
    from airflow_ml_provider.logs.source import LogLine

    lines = [LogLine("rank 0", json.dumps(e)) for e in _of(first_run[1], "metrics") + _of(first_run[1], "checkpoint")]
    shown = [format_line(line) for line in lines]
    per_epoch = _of(first_run[1], "checkpoint")[0]["step"]
    assert [s.split("  ")[0] for s in shown] == [f"[rank 0] epoch {e}" for e in (1, 2, 3)] + [
        f"[rank 0] checkpoint epoch {e} step {e * per_epoch}" for e in (1, 2, 3)]
    tracker = MetricsTracker()
    for line in lines:
        tracker.feed(line)
    assert [row["step"] for row in tracker.history()] == [1, 2, 3]


def test_second_run_resumes_from_last_checkpoint(first_run, train):
    work, run = train
    events = run(5)
    resumed = _of(events, "resumed")
    assert sorted(e["rank"] for e in resumed) == [0, 1]
    assert {(e["epoch"], Path(e["path"]).name) for e in resumed} == {(3, "ckpt-000003.npz")}
    metrics = _of(events, "metrics")
    assert [m["epoch"] for m in metrics] == [4, 5]
    assert metrics[0]["loss"] < _of(first_run[1], "metrics")[-1]["loss"], "continued from trained weights"
    assert [c["epoch"] for c in _of(events, "checkpoint")] == [4, 5]
    _assert_ranks_in_sync(events)
    first_checksum = _of(first_run[1], "weights_checksum")[0]["checksum"]
    assert _of(events, "weights_checksum")[0]["checksum"] != first_checksum, "resumed run kept training"
    assert _of(events, "result")[0]["accuracy"] > 0.8
    assert sorted(p.name for p in (work / "ckpt").iterdir()) == [f"ckpt-{e:06d}.npz" for e in (3, 4, 5)]
    per_epoch = _of(first_run[1], "checkpoint")[0]["step"]
    steps = [int(np.load(work / "ckpt" / f"ckpt-{epoch:06d}.npz")["step"]) for epoch in (3, 4, 5)]
    assert steps == [3 * per_epoch, 4 * per_epoch, 5 * per_epoch], "optimizer step carried over"


def test_an_epoch_shows_progress_between_its_epoch_lines(first_run):
    """Issue 45 D5: a Keras job was silent until its first epoch ended; rank 0 now says where in the epoch it is,
    at most once a second (a progress line, not a point of the epoch curve)."""
    progress = _of(first_run[1], "progress")
    assert progress and progress == _of(first_run[1], "progress", rank=0), "rank 0's only"
    assert all(1 <= p["batch"] < p["batches"] and p["epoch"] in (1, 2, 3) and p["loss"] > 0 for p in progress)
    assert progress[0]["epoch"] == 1 and progress[0]["batch"] == 1, "the first batch is shown at once"
