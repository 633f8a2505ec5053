"""Load, shard and generate the small tabular datasets the trainers use (no downloads at run time)."""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
from pathlib import Path, PurePosixPath

import numpy as np

from airflow_ml_provider.runtime import storage

LABEL_COLUMN = "label"


def load_npz_or_csv(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(X, y)`` from an ``.npz`` (arrays ``X``, ``y``) or a ``.csv`` with a header and ``label``;
    a directory of such shards, or a glob of them (``processed/shard-*/train-*.npz``: the committed parts of a
    sharded preprocessing job, ``runtime.splits``), is read as their concatenation, in path order. ``path`` may
    be a local path or an object-store URL (see runtime.storage).

    Raises:
        FileNotFoundError: the file does not exist (or the directory or glob holds no shard).
        ValueError: unknown extension, or a CSV without a ``label`` column.
    """
    path = os.fspath(path) if not hasattr(path, "fs") else path
    globbed = storage.is_glob(path) and not storage.exists(path)  # (a file may have "[" in its name)
    if globbed or storage.isdir(path):
        shards = [p for p in (storage.glob_files(path) if globbed else storage.list_files(path))
                  if p.endswith((".npz", ".csv"))]
        if not shards:
            raise FileNotFoundError(f"no .npz or .csv shard in {'glob' if globbed else 'directory'} {path}")
        parts = [load_npz_or_csv(shard) for shard in shards]
        return np.concatenate([X for X, _ in parts]), np.concatenate([y for _, y in parts])
    suffix = PurePosixPath(str(path)).suffix
    if suffix not in (".npz", ".csv"):
        raise ValueError(f"{path}: unsupported data format {suffix!r} (use .npz or .csv)")
    try:
        with storage.open_read(path) as f:
            if suffix == ".npz":
                with np.load(f) as data:
                    return data["X"], data["y"]
            text = io.TextIOWrapper(f, encoding="utf-8")
            header = [c.strip() for c in text.readline().split(",")]
            if LABEL_COLUMN not in header:  # the file's content is never quoted: it may be anything
                raise ValueError(f"{path}: no {LABEL_COLUMN!r} column in its header line "
                                 f"({len(header)} comma-separated names, not shown)")
            try:
                table = np.loadtxt(text, delimiter=",", ndmin=2)
            except ValueError:
                raise ValueError(f"{path}: the rows below the header are not all numbers "
                                 "(the values are not shown)") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text (the content is not shown)") from None
    except FileNotFoundError:
        raise FileNotFoundError(f"data file not found: {path}") from None
    label = header.index(LABEL_COLUMN)
    return np.delete(table, label, axis=1), table[:, label]


def save_npz(location, **arrays: np.ndarray) -> str:
    """Write an ``.npz`` atomically to a local path or an object-store URL; returns where it went."""
    return storage.write_atomic(location, lambda tmp: np.savez(tmp, **arrays), ".npz")


def shard(X: np.ndarray, y: np.ndarray, rank: int, num_workers: int) -> tuple[np.ndarray, np.ndarray]:
    """Return this rank's contiguous slice of the rows (``np.array_split`` order)."""
    if not 0 <= rank < num_workers:
        raise ValueError(f"rank {rank} is outside 0..{num_workers - 1}")
    return np.array_split(X, num_workers)[rank], np.array_split(y, num_workers)[rank]


def write_synthetic(
    out: str | Path,
    valid_out: str | Path | None = None,
    rows: int = 20_000,
    features: int = 20,
    seed: int = 0,
    valid_fraction: float = 0.2,
) -> None:
    """Write a binary classification set to ``out`` (and its last ``valid_fraction`` to ``valid_out``)."""
    from sklearn.datasets import make_classification

    X, y = make_classification(
        n_samples=rows, n_features=features, n_informative=max(2, features // 2), random_state=seed
    )
    X, y = X.astype(np.float32), y.astype(np.float32)
    cut = len(X) - int(len(X) * valid_fraction) if valid_out else len(X)
    save_npz(out, X=X[:cut], y=y[:cut])
    if valid_out:
        save_npz(valid_out, X=X[cut:], y=y[cut:])


def load_digits_split(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(X_train, y_train, X_test, y_test)`` of scikit-learn's digits, pixels scaled to [0, 1], a fifth
    of each digit held out (drawn from ``seed``). Read from scikit-learn's own file as ``load_digits`` reads it,
    without importing scikit-learn: that import was a quarter of a one-epoch rank's CPU (docs/testing.md)."""
    data = np.loadtxt(_sklearn_data_file("digits.csv.gz"), delimiter=",")
    X, y = (data[:, :-1] / 16.0).astype(np.float32), data[:, -1].astype(np.int32)
    rng = np.random.default_rng(seed)
    held_out = [rng.permutation(np.flatnonzero(y == digit)) for digit in np.unique(y)]
    test = rng.permutation(np.concatenate([rows[: round(len(rows) / 5)] for rows in held_out]))
    train = rng.permutation(np.setdiff1d(np.arange(len(y)), test))
    return X[train], y[train], X[test], y[test]


def _sklearn_data_file(name: str) -> Path:
    """A data set file scikit-learn installs (``sklearn/datasets/data``), found without importing it."""
    spec = importlib.util.find_spec("sklearn")
    folders = spec.submodule_search_locations if spec else None
    path = Path(folders[0], "datasets", "data", name) if folders else None
    if path is None or not path.is_file():
        raise FileNotFoundError(f"scikit-learn's {name} not found: install scikit-learn in the training image")
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m airflow_ml_provider.runtime.datasets synthetic --rows N --features F --seed S --out F``."""
    parser = argparse.ArgumentParser(prog="python -m airflow_ml_provider.runtime.datasets")
    commands = parser.add_subparsers(dest="command", required=True)
    synthetic = commands.add_parser("synthetic", help="write a synthetic binary classification set")
    synthetic.add_argument("--rows", type=int, default=20_000)
    synthetic.add_argument("--features", type=int, default=20)
    synthetic.add_argument("--seed", type=int, default=0)
    synthetic.add_argument("--valid-fraction", type=float, default=0.2)
    synthetic.add_argument("--out", required=True)
    synthetic.add_argument("--valid-out")
    args = parser.parse_args(argv)
    write_synthetic(args.out, args.valid_out, args.rows, args.features, args.seed, args.valid_fraction)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
