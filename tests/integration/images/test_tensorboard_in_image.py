"""The training image writes TensorBoard scalars: the LightGBM trainer, run in a container of the built image as
its own user on a PVC-like folder, writes its rounds as an event file into AIRFLOW_ML_TENSORBOARD_DIR that
tensorboard's reader (the control env's) parses; and that path imports neither TensorFlow nor torch (the image
has both: tensorboardX's writer imports torch unless runtime.tensorboard hides it)."""

from __future__ import annotations

import re

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from training_image import run_in_image

from airflow_ml_provider.runtime.datasets import write_synthetic

pytestmark = pytest.mark.integration


def test_the_lightgbm_trainer_writes_its_rounds_as_tensorboard_scalars_in_the_image(training_image, claims):
    work = claims["work"]
    write_synthetic(work / "train.npz", work / "valid.npz", rows=2000, features=8, seed=3)
    env = {"AIRFLOW_ML_MODEL_DIR": "/work/job/model", "AIRFLOW_ML_CHECKPOINT_DIR": "/work/job/checkpoints",
           "AIRFLOW_ML_TENSORBOARD_DIR": "/work/job/checkpoints/tensorboard"}
    options = ["-v", f"{work}:/work", *(item for name, value in env.items() for item in ("-e", f"{name}={value}"))]
    done = run_in_image(training_image, [
        "python", "-X", "importtime", "-m", "airflow_ml_provider.runtime.lightgbm_trainer",
        "--train-data", "/work/train.npz", "--valid-data", "/work/valid.npz", "--num-boost-round", "5",
        "--params-json", '{"objective": "binary", "verbose": -1}'], extra=options, timeout=300)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    imported = set(re.findall(r"\|\s+([A-Za-z_][\w.]*)$", done.stderr, re.M))  # ("torch" alone: the hidden try)
    loaded = sorted(name for name in imported if name.startswith(("torch.", "tensorflow")))
    assert "tensorboardX" in imported and not loaded, loaded[:20]
    board = work / "job" / "checkpoints" / "tensorboard"
    accumulator = EventAccumulator(str(board))
    accumulator.Reload()
    assert {"loss", "auc"} <= set(accumulator.Tags()["scalars"]), accumulator.Tags()
    assert [event.step for event in accumulator.Scalars("loss")] == [1, 2, 3, 4, 5]
