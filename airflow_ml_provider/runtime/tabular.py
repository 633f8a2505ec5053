"""Rows of a dataset's file to score, and the predictions written back: Parquet (pyarrow), CSV or NPZ.

A file's features are its columns other than the id column (``id`` by default) and ``label``, in order, and
must be as many as the model takes; an NPZ file holds ``X`` (and optionally ``id``). Rows keep their ids
when the file has them; every row is also named by its file and position. Nothing of a file's content is
quoted in an error (it may be anything).
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from pathlib import PurePosixPath

import numpy as np

from airflow_ml_provider.runtime import storage

SUFFIXES = (".parquet", ".csv", ".npz")
PREDICTIONS = "predictions.parquet"
_SKIPPED = {"label"}


@dataclass
class Rows:
    """One file's rows: features (n, d), ids (or None) and the file's sha256."""

    X: np.ndarray
    ids: np.ndarray | None
    sha256: str


def read_rows(location: str, width: int, id_column: str = "id") -> Rows:
    """The rows of one Parquet, CSV or NPZ file (a path or URL).

    Raises:
        ValueError: an unknown format, or features that are not ``width`` numeric columns.
    """
    suffix = PurePosixPath(location).suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"{location}: unsupported format {suffix!r} (use {', '.join(SUFFIXES)})")
    with storage.open_read(location) as f:
        data = f.read()
    digest = hashlib.sha256(data).hexdigest()
    if suffix == ".npz":
        with np.load(io.BytesIO(data)) as arrays:
            X, ids = arrays["X"], arrays[id_column] if id_column in arrays else None
    else:
        names, columns = _columns(location, data, suffix)
        ids = columns[names.index(id_column)] if id_column in names else None
        features = [c for n, c in zip(names, columns) if n != id_column and n not in _SKIPPED]
        try:
            X = np.column_stack(features).astype(np.float32) if features else np.empty((0, 0))
        except (TypeError, ValueError):
            raise ValueError(f"{location}: its feature columns are not all numbers (the values are not shown)") from None
    if X.ndim != 2 or X.shape[1] != width:
        raise ValueError(f"{location}: {X.shape[-1] if X.ndim else 0} feature columns, the model takes {width} "
                         f"(the columns other than {id_column!r} and 'label')")
    return Rows(np.asarray(X, dtype=np.float32), None if ids is None else np.asarray(ids), digest)


def _columns(location: str, data: bytes, suffix: str) -> tuple[list[str], list[np.ndarray]]:
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(io.BytesIO(data))
        return table.column_names, [column.to_numpy(zero_copy_only=False) for column in table.columns]
    import pyarrow.csv as pv

    try:
        table = pv.read_csv(io.BytesIO(data))
    except Exception:  # noqa: BLE001 - pyarrow's errors quote the content
        raise ValueError(f"{location}: not a CSV file with a header line (the content is not shown)") from None
    return table.column_names, [column.to_numpy(zero_copy_only=False) for column in table.columns]


def write_predictions(path: str, files: list[int], rows: list[int], ids: np.ndarray | None,
                      probabilities: np.ndarray) -> None:
    """``predictions.parquet``: per row its input (``file``: its place in the shard's inputs), ``row`` (its place in
    the file), ``id`` (when the files have one), the predicted ``label`` and each class's probability."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {"file": pa.array(files, pa.int32()), "row": pa.array(rows, pa.int64())}
    if ids is not None:
        columns["id"] = pa.array(ids)
    columns["label"] = pa.array(probabilities.argmax(axis=1).astype(np.int64))
    for k in range(probabilities.shape[1]):
        columns[f"p{k}"] = pa.array(probabilities[:, k].astype(np.float64))
    pq.write_table(pa.table(columns), path)
