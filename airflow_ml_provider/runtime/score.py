"""Batch scoring worker: a registered model's file scores a batch, reported as one ``result`` line.

Runs as a one-worker job in the image of the framework that trained the model (``ml_batch_scoring``
chooses it by the model file: a Keras model needs TensorFlow, which the Airflow worker lacks):
``python -m airflow_ml_provider.runtime.score --model M --features D --rows N [--out DIR]``. The batch is
generated (seeded: the same rows every time); the predicted labels go to ``DIR/predictions.csv`` (default
DIR: the job's model directory). Imports are inside ``main``: the operator reads ``PREDICTIONS`` at parse.
"""

from __future__ import annotations

import sys

PREDICTIONS = "predictions.csv"


def main(argv: list[str] | None = None) -> int:
    import argparse

    import numpy as np

    from airflow_ml_provider.runtime import storage
    from airflow_ml_provider.runtime.metrics_log import emit, worker_env
    from airflow_ml_provider.runtime.predict import load_predictor
    from airflow_ml_provider.runtime.quiet import quiet_startup

    parser = argparse.ArgumentParser(prog="python -m airflow_ml_provider.runtime.score")
    parser.add_argument("--model", required=True, help="model.txt (LightGBM), model.keras or model.pt (path or URL)")
    parser.add_argument("--features", type=int, required=True, help="the model's input width (its signature's)")
    parser.add_argument("--rows", type=int, required=True, help="rows in the generated batch")
    parser.add_argument("--out", default=worker_env().model_dir,
                        help="the folder predictions.csv is written to (path or URL; default: the job's model dir)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.out:
        parser.error("--out: no folder given and the job has no model directory")
    batch = np.random.default_rng(args.seed).normal(size=(args.rows, args.features)).astype(np.float32)
    try:
        with storage.local_copy(args.model) as model, quiet_startup():  # a Keras model imports TensorFlow
            predict = load_predictor(model)
        labels = predict(batch).argmax(axis=1)
    except (OSError, ValueError) as exc:
        print(f"score: error: {exc}", file=sys.stderr)
        return 2

    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write("row,label\n")
            f.writelines(f"{i},{label}\n" for i, label in enumerate(labels.tolist()))

    written = storage.write_atomic(storage.child(args.out, PREDICTIONS), write, ".csv")
    values, counts = np.unique(labels, return_counts=True)
    emit("result", rows=int(len(labels)), predictions=written,
         label_counts={str(int(v)): int(c) for v, c in zip(values, counts)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
