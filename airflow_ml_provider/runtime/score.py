"""Batch scoring worker: a registered model's file scores a batch, reported as one ``result`` line.

Runs in the image of the framework that trained the model (``ml_batch_scoring`` chooses it by the model file:
a Keras model needs TensorFlow, which the Airflow worker lacks). Two inputs:

- a generated batch (the demo's default): ``python -m airflow_ml_provider.runtime.score --model M --features D
  --rows N [--out DIR]``, a one-worker job; the predicted labels go to ``DIR/predictions.csv`` (default DIR: the
  job's model directory), the rows seeded (the same every time);
- a dataset, as a sharded job's worker (``runtime.shards``): ``... --model M --features D --shards [--lineage
  JSON] [--id-column id]`` scores each shard's files (Parquet, CSV or NPZ: ``runtime.tabular``) into the shard's
  ``predictions.parquet`` and ``lineage.json`` (the model version, each input file and its sha256, the rows).

Imports are inside ``main``: the operator reads ``PREDICTIONS`` at parse.
"""

from __future__ import annotations

import json
import sys

PREDICTIONS = "predictions.csv"


def main(argv: list[str] | None = None) -> int:
    import argparse

    from airflow_ml_provider.runtime.metrics_log import worker_env

    parser = argparse.ArgumentParser(prog="python -m airflow_ml_provider.runtime.score")
    parser.add_argument("--model", required=True, help="model.txt (LightGBM), model.keras or model.pt (path or URL)")
    parser.add_argument("--features", type=int, required=True, help="the model's input width (its signature's)")
    parser.add_argument("--rows", type=int, help="rows in the generated batch")
    parser.add_argument("--shards", action="store_true", help="score the sharded job's shards (runtime.shards)")
    parser.add_argument("--lineage", default="{}", help="what each shard's lineage.json records of the model (JSON)")
    parser.add_argument("--id-column", default="id", help="the dataset's column of row ids")
    parser.add_argument("--out", default=worker_env().model_dir,
                        help="the folder predictions.csv is written to (path or URL; default: the job's model dir)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.shards == (args.rows is not None):
        parser.error("give one of --rows (a generated batch) and --shards (a dataset)")
    try:
        predict = _predictor(args.model)
    except (OSError, ValueError) as exc:
        print(f"score: error: {exc}", file=sys.stderr)
        return 2
    if args.shards:
        return _serve(predict, args)
    return _generated(predict, args, parser)


def _predictor(model_location: str):
    from airflow_ml_provider.runtime import storage
    from airflow_ml_provider.runtime.predict import load_predictor
    from airflow_ml_provider.runtime.quiet import quiet_startup

    with storage.local_copy(model_location) as model, quiet_startup():  # a Keras model imports TensorFlow
        return load_predictor(model)


def _serve(predict, args) -> int:
    """Score each shard the launcher hands this worker: its files' rows, then its predictions and lineage."""
    import os

    import numpy as np

    from airflow_ml_provider.runtime import tabular
    from airflow_ml_provider.runtime.shards import serve

    model = json.loads(args.lineage)

    def score(shard) -> int:
        read = [tabular.read_rows(path, args.features, args.id_column) for path in shard.inputs]
        X = np.concatenate([rows.X for rows in read]) if read else np.empty((0, args.features), np.float32)
        with_ids = bool(read) and all(rows.ids is not None for rows in read)
        ids = np.concatenate([rows.ids for rows in read]) if with_ids else None
        files = [i for i, rows in enumerate(read) for _ in range(len(rows.X))]
        positions = [r for rows in read for r in range(len(rows.X))]
        probabilities = predict(X) if len(X) else np.empty((0, 2))
        tabular.write_predictions(os.path.join(shard.output, tabular.PREDICTIONS), files, positions, ids, probabilities)
        lineage = {**model, "shard": shard.index, "attempt": shard.attempt, "rows": len(X),
                   "inputs": [{"path": path, "sha256": rows.sha256, "rows": len(rows.X)}
                              for path, rows in zip(shard.inputs, read)], "predictions": tabular.PREDICTIONS}
        with open(os.path.join(shard.output, "lineage.json"), "w") as f:
            json.dump(lineage, f, indent=2)
        return len(X)

    return serve(score)


def _generated(predict, args, parser) -> int:
    import numpy as np

    from airflow_ml_provider.runtime import storage
    from airflow_ml_provider.runtime.metrics_log import emit

    if not args.out:
        parser.error("--out: no folder given and the job has no model directory")
    batch = np.random.default_rng(args.seed).normal(size=(args.rows, args.features)).astype(np.float32)
    try:
        labels = predict(batch).argmax(axis=1)
    except ValueError as exc:
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
