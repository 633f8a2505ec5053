"""runtime.tabular in the training environment (pyarrow): a scoring shard's rows from Parquet, CSV and NPZ files
(ids kept, the id and label columns not features), predictions written back, and a file that does not fit the
model refused naming it, its content never quoted."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from support import TRAINING_PYTHON, needs_training_env

pytestmark = [pytest.mark.integration, needs_training_env]

SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import numpy as np, pyarrow as pa, pyarrow.parquet as pq
    from airflow_ml_provider.runtime import tabular

    folder = Path(sys.argv[1])
    X = np.arange(12, dtype=np.float32).reshape(4, 3)
    pq.write_table(pa.table({"id": [7, 8, 9, 10], "f0": X[:, 0], "label": [0, 1, 0, 1], "f1": X[:, 1], "f2": X[:, 2]}),
                   folder / "a.parquet")
    (folder / "b.csv").write_text("f0,f1,f2,id\\n" + "".join(f"{r[0]},{r[1]},{r[2]},{100 + i}\\n" for i, r in enumerate(X)))
    np.savez(folder / "c.npz", X=X)
    (folder / "d.csv").write_text("f0,f1\\nsecret,1\\n")
    found = {}
    for name in ("a.parquet", "b.csv", "c.npz"):
        rows = tabular.read_rows(str(folder / name), 3)
        found[name] = {"X": rows.X.tolist(), "ids": None if rows.ids is None else rows.ids.tolist(),
                       "sha256": len(rows.sha256)}
    for name in ("d.csv", "e.json"):
        try:
            tabular.read_rows(str(folder / name), 3)
        except (ValueError, FileNotFoundError) as exc:
            found[name] = str(exc)
    tabular.write_predictions(str(folder / "p.parquet"), [0, 0], [0, 1], np.array([7, 8]), np.array([[0.9, 0.1], [0.2, 0.8]]))
    found["predictions"] = pq.read_table(folder / "p.parquet").to_pydict()
    print(json.dumps(found))
""")


def test_rows_of_parquet_csv_and_npz_files_and_predictions_written_back(tmp_path):
    done = subprocess.run([str(TRAINING_PYTHON), "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True,
                          check=True)
    found = json.loads(done.stdout)
    X = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0], [9.0, 10.0, 11.0]]
    assert found["a.parquet"] == {"X": X, "ids": [7, 8, 9, 10], "sha256": 64}, "label and id are no features"
    assert found["b.csv"] == {"X": X, "ids": [100, 101, 102, 103], "sha256": 64}
    assert found["c.npz"] == {"X": X, "ids": None, "sha256": 64}
    assert found["d.csv"].endswith("d.csv: its feature columns are not all numbers (the values are not shown)")
    assert "secret" not in found["d.csv"]
    assert "unsupported format '.json'" in found["e.json"]
    assert found["predictions"] == {"file": [0, 0], "row": [0, 1], "id": [7, 8], "label": [0, 1], "p0": [0.9, 0.2],
                                    "p1": [0.1, 0.8]}
