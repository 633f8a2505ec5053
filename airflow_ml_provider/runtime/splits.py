"""Splitting a dataset into shards and held-out sets, each identified by a content hash."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from airflow_ml_provider.runtime import storage
from airflow_ml_provider.runtime.datasets import load_npz_or_csv, save_npz


def file_sha256(path) -> str:
    """Content hash of a local file or an object-store URL."""
    return storage.sha256(path)


def split_dataset(
    source: str | Path,
    out_dir,
    shards: int,
    valid_fraction: float = 0.1,
    test_fraction: float = 0.2,
    seed: int = 0,
) -> dict:
    """Shuffle ``source`` once (seeded), cut off a held-out test set and a validation set, and split
    the rest into ``shards`` training shards, written under ``out_dir/raw``. ``out_dir`` is a local
    path, an object-store URL or an ``ObjectStoragePath`` (whose connection's credentials are used).

    Returns small references only: ``{"data_version", "n_classes", "items": [{"input_path",
    "output_path"}], "train_dir", "valid", "test"}``, where each item is one preprocessing input and
    its output path under ``out_dir/processed`` (train shards, then the test and validation sets).
    """
    if shards < 1:
        raise ValueError(f"shards must be at least 1 (got {shards})")
    X, y = load_npz_or_csv(source)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test, n_valid = int(len(y) * test_fraction), int(len(y) * valid_fraction)
    if len(y) - n_test - n_valid < shards or min(n_test, n_valid) < 1:
        raise ValueError(
            f"{source}: {len(y)} rows are too few for {shards} shards plus validation and test sets"
        )
    parts = {"test/part-00000.npz": order[:n_test], "valid/part-00000.npz": order[n_test : n_test + n_valid]}
    for index, rows in enumerate(np.array_split(order[n_test + n_valid :], shards)):
        parts[f"train/part-{index:05d}.npz"] = rows
    out_dir = out_dir if hasattr(out_dir, "fs") else str(out_dir)
    items = []
    for name, rows in sorted(parts.items(), key=lambda part: (not part[0].startswith("train"), part[0])):
        raw = save_npz(_within(out_dir, "raw", name), X=X[rows], y=y[rows])
        items.append({"input_path": raw, "output_path": storage.child(out_dir, "processed", name)})
    return {
        "data_version": file_sha256(source)[:16],
        "n_classes": int(y.max()) + 1,
        "items": items,
        "train_dir": storage.child(out_dir, "processed", "train"),
        "valid": storage.child(out_dir, "processed", "valid", "part-00000.npz"),
        "test": storage.child(out_dir, "processed", "test", "part-00000.npz"),
    }


def _within(out_dir, *parts: str):
    """``out_dir/parts`` keeping an ObjectStoragePath's filesystem (and so its credentials)."""
    return out_dir.joinpath(*parts) if hasattr(out_dir, "fs") else storage.child(out_dir, *parts)
