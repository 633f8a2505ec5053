"""The trainers import TensorFlow and LightGBM without scikit-learn (runtime.lean_imports) and read the bundled
digits without it (runtime.datasets), and a rank that computes metrics still imports it. Real trainers in the
training environment; what each process had imported is read from its own ``sys.modules``."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from support import TRAINING_PYTHON, needs_horovod, needs_training_env

pytestmark = [pytest.mark.integration, needs_training_env]

TRAIN = """
import json, sys
from airflow_ml_provider.runtime import {trainer} as trainer
code = trainer.main(sys.argv[1:])
print(json.dumps({{"code": code, "sklearn": sorted(m for m in sys.modules if m.split(".")[0] == "sklearn")}}))
"""


def _train(trainer: str, *args: str) -> tuple[dict, str]:
    """The trainer's exit code and the scikit-learn modules it had imported; its stdout (the events)."""
    done = subprocess.run([TRAINING_PYTHON, "-c", TRAIN.format(trainer=trainer), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    *events, last = done.stdout.splitlines()
    return json.loads(last), "\n".join(events)


@pytest.fixture
def data(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 8)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(np.float32)
    np.savez(tmp_path / "train.npz", X=X[:500], y=y[:500])
    np.savez(tmp_path / "valid.npz", X=X[500:], y=y[500:])
    return tmp_path


def test_a_lightgbm_rank_without_held_out_data_never_imports_sklearn_and_one_with_it_scores_the_auc(data):
    common = ["--train-data", str(data / "train.npz"), "--num-boost-round", "5", "--model-dir", str(data / "m")]
    plain, _ = _train("lightgbm_trainer", *common, "--checkpoint-dir", str(data / "c1"))
    assert plain == {"code": 0, "sklearn": []}
    assert (data / "m" / "model.txt").is_file()
    scored, events = _train("lightgbm_trainer", *common, "--checkpoint-dir", str(data / "c2"),
                            "--valid-data", str(data / "valid.npz"))
    assert scored["code"] == 0 and "sklearn.metrics" in scored["sklearn"]
    assert '"auc"' in events


@needs_horovod
def test_a_keras_rank_on_given_data_never_imports_sklearn(data):
    imported, events = _train("horovod_keras", "--epochs", "1", "--steps-per-epoch", "5",
                              "--train-data", str(data / "train.npz"), "--test-data", str(data / "valid.npz"),
                              "--model-dir", str(data / "m"), "--checkpoint-dir", str(data / "c"))
    assert imported == {"code": 0, "sklearn": []}
    assert (data / "m" / "model.keras").is_file() and '"result"' in events


def test_the_bundled_digits_load_without_importing_sklearn():
    """What the Horovod and PyTorch ranks without data files read, before they import their framework."""
    probe = ("import sys; from airflow_ml_provider.runtime.datasets import load_digits_split; "
             "X_train, *_ = load_digits_split(0); print(len(X_train), 'sklearn' in sys.modules)")
    done = subprocess.run([TRAINING_PYTHON, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["1438", "False"]
