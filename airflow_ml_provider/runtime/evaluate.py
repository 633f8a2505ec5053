"""Evaluation worker: a trained model on a held-out set, reported as one ``result`` line.

Runs as a one-worker job in the training image (loading a Keras model needs TensorFlow, which
the Airflow worker does not have): ``python -m airflow_ml_provider.runtime.evaluate --model M
--test-data T [--champion-model C]``. With ``--champion-model``, the registered champion is scored on
the very same rows, so the gate compares like with like (its ``champion`` field: the champion's
metrics, or ``{"error": ...}`` when it cannot score this data).
"""

from __future__ import annotations

import argparse
import hashlib
import sys

import numpy as np

from airflow_ml_provider.runtime import storage
from airflow_ml_provider.runtime.datasets import load_npz_or_csv
from airflow_ml_provider.runtime.metrics_log import emit
from airflow_ml_provider.runtime.predict import load_predictor
from airflow_ml_provider.runtime.splits import file_sha256


def classification_metrics(y: np.ndarray, probabilities: np.ndarray) -> dict[str, float]:
    """Accuracy, macro F1, log loss, and ROC AUC (one-vs-rest beyond two classes; omitted when the
    held-out set has a single class)."""
    from sklearn.metrics import accuracy_score, f1_score, log_loss, roc_auc_score

    labels = list(range(probabilities.shape[1]))
    y = y.astype(int)
    predicted = probabilities.argmax(axis=1)
    metrics = {
        "accuracy": accuracy_score(y, predicted),
        "f1": f1_score(y, predicted, average="macro", labels=labels, zero_division=0),
        "log_loss": log_loss(y, np.clip(probabilities, 1e-15, 1), labels=labels),
    }
    if len(np.unique(y)) > 1:
        metrics["auc"] = (
            roc_auc_score(y, probabilities[:, 1])
            if len(labels) == 2
            else roc_auc_score(y, probabilities, multi_class="ovr", labels=labels)
        )
    return {name: round(float(value), 6) for name, value in metrics.items()}


def rows_sha256(X: np.ndarray, y: np.ndarray) -> str:
    """The held-out rows' identity, from their values (an .npz file's bytes also hold when it was written):
    two evaluations with the same digest scored the same rows, so their metrics compare."""
    digest = hashlib.sha256()
    for array in (np.ascontiguousarray(X, dtype=np.float32), np.ascontiguousarray(y, dtype=np.float64)):
        digest.update(repr(array.shape).encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    """Evaluate and emit metrics, shapes (for the model signature), the model's content hash and the rows'."""
    parser = argparse.ArgumentParser(prog="python -m airflow_ml_provider.runtime.evaluate")
    parser.add_argument("--model", required=True, help="model.txt (LightGBM), model.keras or model.pt (path or URL)")
    parser.add_argument("--test-data", required=True, help="held-out .npz (X, y) or .csv with a label column")
    parser.add_argument("--champion-model", help="the current champion's model file, scored on the same rows")
    args = parser.parse_args(argv)
    try:
        X, y = load_npz_or_csv(args.test_data)
        with storage.local_copy(args.model) as model:  # Keras, LightGBM and torch load from a local file
            probabilities = load_predictor(model)(X.astype(np.float32))
            model_sha256 = file_sha256(model)
    except (OSError, ValueError, KeyError) as exc:
        print(f"evaluate: error: {exc}", file=sys.stderr)
        return 2
    from sklearn.metrics import confusion_matrix

    labels = list(range(probabilities.shape[1]))
    champion = _champion_metrics(args.champion_model, X, y, len(labels)) if args.champion_model else None
    emit(
        "result",
        **classification_metrics(y, probabilities),
        **({"champion": champion} if champion is not None else {}),
        rows=len(y),
        n_features=int(X.shape[1]),
        n_classes=len(labels),
        model_sha256=model_sha256,
        rows_sha256=rows_sha256(X, y),
        confusion_matrix=confusion_matrix(
            y.astype(int), probabilities.argmax(axis=1), labels=labels
        ).tolist(),
    )
    return 0


def _champion_metrics(location: str, X: np.ndarray, y: np.ndarray, n_classes: int) -> dict[str, object]:
    """The champion's metrics on the challenger's held-out rows, or why it could not be scored there
    (another input width or class count: then the two models are not comparable on this data)."""
    try:
        with storage.local_copy(location) as model:
            probabilities = load_predictor(model)(X.astype(np.float32))
    except Exception as exc:  # noqa: BLE001 (any load/predict failure means: not comparable here)
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    if probabilities.shape[1] != n_classes:
        return {"error": f"it predicts {probabilities.shape[1]} classes, this test set has {n_classes}"}
    return classification_metrics(y, probabilities)


if __name__ == "__main__":
    raise SystemExit(main())
