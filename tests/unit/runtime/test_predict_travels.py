"""``runtime/predict.py`` travels inside every registered model (``code_paths``; ``served_model.py`` imports it as
``predict`` where this package is not installed), so it must load a model with nothing of the package: run here
from a folder of its own, in the training environment, with the package made unimportable."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from airflow_ml_provider.runtime import predict
from support import TRAINING_PYTHON, needs_training_env

pytestmark = [pytest.mark.integration, needs_training_env]

SERVE = """
import sys
sys.modules["airflow_ml_provider"] = None  # as in a serving image without the package
import lightgbm as lgb
import numpy as np
from predict import load_predictor

X = np.random.default_rng(0).normal(size=(200, 4))
lgb.train({"objective": "binary", "verbose": -1}, lgb.Dataset(X, X[:, 0] > 0), 3).save_model("model.txt")
print(load_predictor("model.txt")(X).shape)
"""


def test_predict_loads_a_model_without_the_package(tmp_path):
    shutil.copy(predict.__file__, tmp_path / "predict.py")
    done = subprocess.run([TRAINING_PYTHON, "-c", SERVE], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "(200, 2)"


SERVE_XGBOOST = """
import sys
sys.modules["airflow_ml_provider"] = None
import numpy as np
import xgboost as xgb
from predict import load_predictor

X = np.random.default_rng(0).normal(size=(200, 4)).astype(np.float32)
binary = xgb.train({"objective": "binary:logistic", "nthread": 1}, xgb.DMatrix(X, X[:, 0] > 0), 3)
binary.save_model("model.ubj")
probabilities = load_predictor("model.ubj")(X)
assert np.allclose(probabilities[:, 1], binary.predict(xgb.DMatrix(X))) and np.allclose(probabilities.sum(1), 1)
labels = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0)
xgb.train({"objective": "multi:softprob", "num_class": 3, "nthread": 1}, xgb.DMatrix(X, labels), 3).save_model("model.ubj")
print(probabilities.shape, load_predictor("model.ubj")(X).shape)
"""


def test_predict_loads_an_xgboost_model_binary_and_multiclass_without_the_package(tmp_path):
    shutil.copy(predict.__file__, tmp_path / "predict.py")
    done = subprocess.run([TRAINING_PYTHON, "-c", SERVE_XGBOOST], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "(200, 2) (200, 3)"
