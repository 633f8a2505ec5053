"""Splitting a dataset into shards and held-out sets, each identified by a content hash, and where a sharded
preprocessing job commits each part."""

from __future__ import annotations

import posixpath
from pathlib import Path

import numpy as np

from airflow_ml_provider.runtime import storage
from airflow_ml_provider.runtime.datasets import load_npz_or_csv, save_npz
from airflow_ml_provider.runtime.shards import shard_name

SHARD_GLOB = "shard-*"  # the committed shards (runtime.shards: tries in progress are under .tmp/, never matched)


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
    the rest into ``shards`` training shards, written under ``out_dir/raw`` (``train-00000.npz``...,
    ``test.npz``, ``valid.npz``). ``out_dir`` is a local path, an object-store URL or an
    ``ObjectStoragePath`` (whose connection's credentials are used).

    Returns small references only: ``{"data_version", "n_classes", "inputs", "processed", "train", "valid",
    "test"}``: ``inputs`` are the parts to preprocess, one shard each of one sharded job (the train shards,
    then the test and validation sets), committing under ``processed`` (:func:`part_location`); ``train`` is
    the glob of the train parts' outputs, ``valid`` and ``test`` the held-out sets' files.
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
    parts = {f"train-{index:05d}.npz": rows
             for index, rows in enumerate(np.array_split(order[n_test + n_valid :], shards))}
    parts |= {"test.npz": order[:n_test], "valid.npz": order[n_test : n_test + n_valid]}
    out_dir = out_dir if hasattr(out_dir, "fs") else str(out_dir)
    inputs = [save_npz(_within(out_dir, "raw", name), X=X[rows], y=y[rows]) for name, rows in parts.items()]
    processed = storage.child(out_dir, "processed")
    return {
        "data_version": file_sha256(source)[:16],
        "n_classes": int(y.max()) + 1,
        "inputs": inputs,
        "processed": processed,
        "train": storage.child(processed, f"{SHARD_GLOB}/train-*.npz"),
        "test": part_location(processed, shards, inputs[shards]),
        "valid": part_location(processed, shards + 1, inputs[shards + 1]),
    }


def part_location(output: str, index: int, input_path: str) -> str:
    """Where a sharded preprocessing job commits part ``index`` (``input_path``): ``<output>/shard-<index>/``
    with the input's file name (``runtime.preprocess --shards`` writes it so)."""
    return f"{output.rstrip('/')}/{shard_name(index)}/{part_file(input_path)}"


def part_file(input_path: str) -> str:
    """A part's output file name in its shard: its input's."""
    return posixpath.basename(str(input_path).rstrip("/"))


def _within(out_dir, *parts: str):
    """``out_dir/parts`` keeping an ObjectStoragePath's filesystem (and so its credentials)."""
    return out_dir.joinpath(*parts) if hasattr(out_dir, "fs") else storage.child(out_dir, *parts)
