"""Class probabilities from a trained model file, whichever trainer wrote it (LightGBM, XGBoost, Keras, PyTorch or
the parameter-server trainer)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

Predictor = Callable[[np.ndarray], np.ndarray]


def load_predictor(path: str | Path) -> Predictor:
    """A function from features (n, d) to class probabilities (n, k), for ``model.txt`` (LightGBM), ``model.ubj``
    (XGBoost), ``model.keras`` (Keras), ``model.pt`` (``runtime.torch_ddp``'s) or ``model.npz``
    (``runtime.tf_ps_trainer``'s), logits turned into probabilities.
    Raises ValueError otherwise."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model file not found: {path}")
    if path.suffix == ".txt":
        import lightgbm as lgb

        booster = lgb.Booster(model_file=str(path))
        return lambda X: _as_class_probabilities(booster.predict(X))
    if path.suffix == ".ubj":
        import xgboost as xgb

        model = xgb.Booster(model_file=str(path))
        model.set_param({"nthread": 1})
        return lambda X: _as_class_probabilities(model.predict(xgb.DMatrix(X)))
    if path.suffix == ".keras":
        import keras

        model = keras.saving.load_model(path)
        return lambda X: _softmax(np.asarray(model(X, training=False)))
    if path.suffix == ".pt":
        import torch

        module = load_torch_mlp(path)

        def predict(X: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return _softmax(module(torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))).numpy())

        return predict
    if path.suffix == ".npz":
        weights, bias = load_linear(path)
        return lambda X: _softmax(X @ weights + bias)
    raise ValueError(f"{path}: unknown model format {path.suffix!r} "
                     "(expected model.txt, model.ubj, model.keras, model.pt or model.npz)")


def load_linear(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """``runtime.tf_ps_trainer``'s model: a softmax layer's ``weights`` (d, k) and ``bias`` (k). Arrays only
    (``allow_pickle=False``: nothing in the file is run); their shapes checked against each other."""
    with np.load(path, allow_pickle=False) as arrays:
        weights, bias = np.asarray(arrays["weights"], dtype=np.float32), np.asarray(arrays["bias"], dtype=np.float32)
    if weights.ndim != 2 or bias.shape != (weights.shape[1],):
        raise ValueError(f"{path}: weights {weights.shape} and bias {bias.shape} are not a softmax layer's")
    return weights, bias


def torch_mlp(n_features: int, n_classes: int):
    """``runtime.torch_ddp``'s network, built here so that a ``model.pt`` loads wherever this file goes."""
    import torch

    return torch.nn.Sequential(torch.nn.Linear(n_features, 64), torch.nn.ReLU(), torch.nn.Linear(64, n_classes))


def load_torch_mlp(path: str | Path):
    """The network in a ``model.pt`` (its state dict and sizes), in eval mode. ``weights_only``: tensors
    and numbers are read back, nothing in the file is run."""
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    model = torch_mlp(int(state["n_features"]), int(state["n_classes"]))
    model.load_state_dict(state["model"])
    return model.eval()


def _as_class_probabilities(scores: np.ndarray) -> np.ndarray:
    """LightGBM's and XGBoost's binary objectives predict P(class 1) only; add the P(class 0) column."""
    return np.column_stack([1 - scores, scores]) if scores.ndim == 1 else scores


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)
