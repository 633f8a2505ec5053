"""Class probabilities from a trained model file, whichever trainer wrote it (LightGBM or Keras)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

Predictor = Callable[[np.ndarray], np.ndarray]


def load_predictor(path: str | Path) -> Predictor:
    """A function from features (n, d) to class probabilities (n, k), for ``model.txt`` (LightGBM)
    or ``model.keras`` (Keras, logits turned into probabilities). Raises ValueError otherwise."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model file not found: {path}")
    if path.suffix == ".txt":
        import lightgbm as lgb

        booster = lgb.Booster(model_file=str(path))
        return lambda X: _as_class_probabilities(booster.predict(X))
    if path.suffix == ".keras":
        import keras

        model = keras.saving.load_model(path)
        return lambda X: _softmax(np.asarray(model(X, training=False)))
    raise ValueError(f"{path}: unknown model format {path.suffix!r} (expected model.txt or model.keras)")


def _as_class_probabilities(scores: np.ndarray) -> np.ndarray:
    """LightGBM's binary objective predicts P(class 1) only; add the P(class 0) column."""
    return np.column_stack([1 - scores, scores]) if scores.ndim == 1 else scores


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)
