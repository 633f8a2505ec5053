"""Preprocessing worker: one data shard in, its cleaned copy out (``--input IN --output OUT``), or, as a
worker of a sharded job (``--shards``: ``runtime.shards.serve``, one process taking many parts), each shard's
files cleaned into its output directory under their own names (``runtime.splits.part_location``).

Stateless on purpose (no statistics fitted across shards), so every shard, and the held-out
sets, can go through the same command independently, in parallel: rows with missing or infinite
values are dropped, features are clipped to ``[-clip, clip]`` and stored as float32.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from airflow_ml_provider.runtime.datasets import load_npz_or_csv, save_npz
from airflow_ml_provider.runtime.metrics_log import emit
from airflow_ml_provider.runtime.splits import file_sha256


def clean(X: np.ndarray, y: np.ndarray, clip: float) -> tuple[np.ndarray, np.ndarray]:
    keep = np.isfinite(X).all(axis=1) & np.isfinite(y)
    return np.clip(X[keep], -clip, clip).astype(np.float32), y[keep].astype(np.float32)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_ml_provider.runtime.preprocess")
    parser.add_argument("--input", help=".npz (X, y) or .csv with a label column (path or URL)")
    parser.add_argument("--output", help="the cleaned shard (.npz; path or URL)")
    parser.add_argument("--shards", action="store_true",
                        help="be a sharded job's worker: clean each shard's inputs (AIRFLOW_ML_SHARD_INPUTS) into "
                             "its output (AIRFLOW_ML_SHARD_OUTPUT)")
    parser.add_argument(
        "--clip", type=float, default=10.0, help="feature values are clipped to [-clip, clip]"
    )
    args = parser.parse_args(argv)
    one_part = args.input is not None and args.output is not None
    if not (one_part if not args.shards else args.input is None and args.output is None):
        parser.error("give --input and --output (one part), or --shards (a sharded job's worker)")
    if args.shards:
        return serve_shards(args.clip)
    try:
        X, y = load_npz_or_csv(args.input)
    except (OSError, ValueError, KeyError) as exc:
        print(f"preprocess: error: {exc}", file=sys.stderr)
        return 2
    X_out, y_out = clean(X, y, args.clip)
    save_npz(args.output, X=X_out, y=y_out)  # atomic: a retried shard never leaves half a file behind
    emit("result", rows_in=len(y), rows_out=len(y_out), sha256=file_sha256(args.output))
    return 0


def serve_shards(clip: float) -> int:
    """Clean the shards the sharded job's launcher hands this process, one after another; each shard's marker
    keeps its parts' lineage (``parts``: input, output file, rows in and out, sha256)."""
    import os

    from airflow_ml_provider.runtime.shards import serve
    from airflow_ml_provider.runtime.splits import part_file

    def run(shard) -> int:
        parts = []
        for path in shard.inputs:
            X, y = load_npz_or_csv(path)
            X_out, y_out = clean(X, y, clip)
            written = save_npz(os.path.join(shard.output, part_file(path)), X=X_out, y=y_out)
            parts.append({"input": path, "output": part_file(path), "rows_in": len(y), "rows_out": len(y_out),
                          "sha256": file_sha256(written)})
        shard.info["parts"] = parts
        return sum(part["rows_out"] for part in parts)

    return serve(run)


if __name__ == "__main__":
    raise SystemExit(main())
