"""Worker-side data steps of the pipeline: splitting, preprocessing a shard, shard directories."""

from __future__ import annotations

import json

import numpy as np

from airflow_ml_provider.runtime import preprocess
from airflow_ml_provider.runtime.datasets import load_npz_or_csv, write_synthetic
from airflow_ml_provider.runtime.splits import file_sha256, split_dataset


def test_split_writes_disjoint_shards_and_held_out_sets(tmp_path):
    write_synthetic(tmp_path / "source.npz", rows=1000, features=4, seed=1)
    split = split_dataset(tmp_path / "source.npz", tmp_path / "out", shards=3)
    assert len(split["items"]) == 5 and split["n_classes"] == 2
    assert split["data_version"] == file_sha256(tmp_path / "source.npz")[:16]
    rows = [load_npz_or_csv(item["input_path"])[0] for item in split["items"]]
    assert [len(r) for r in rows] == [234, 233, 233, 200, 100]  # 3 train shards, test (20%), valid (10%)
    seen = np.concatenate(rows)
    assert len(np.unique(seen, axis=0)) == 1000, "every row lands in exactly one part"
    assert [item["output_path"] for item in split["items"]][-2:] == [split["test"], split["valid"]]


def test_preprocess_cleans_one_shard_and_reports_it(tmp_path, capsys):
    X = np.array([[1.0, 50.0], [np.nan, 1.0], [2.0, -70.0], [np.inf, 0.0]])
    np.savez(tmp_path / "in.npz", X=X, y=np.array([0, 1, 1, 0]))
    assert preprocess.main(["--input", str(tmp_path / "in.npz"), "--output", str(tmp_path / "o" / "out.npz"),
                            "--clip", "10"]) == 0
    X_out, y_out = load_npz_or_csv(tmp_path / "o" / "out.npz")
    assert X_out.tolist() == [[1.0, 10.0], [2.0, -10.0]] and y_out.tolist() == [0.0, 1.0]
    assert X_out.dtype == np.float32
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (result["event"], result["rows_in"], result["rows_out"]) == ("result", 4, 2)
    assert result["sha256"] == file_sha256(tmp_path / "o" / "out.npz")


def test_preprocess_reports_a_missing_input_as_a_usage_error(tmp_path, capsys):
    assert preprocess.main(["--input", str(tmp_path / "none.npz"), "--output", str(tmp_path / "x.npz")]) == 2
    assert "data file not found" in capsys.readouterr().err


def test_a_directory_of_shards_loads_as_their_concatenation_in_name_order(tmp_path):
    np.savez(tmp_path / "part-00001.npz", X=np.ones((2, 3)), y=np.ones(2))
    np.savez(tmp_path / "part-00000.npz", X=np.zeros((1, 3)), y=np.zeros(1))
    X, y = load_npz_or_csv(tmp_path)
    assert X.shape == (3, 3) and y.tolist() == [0.0, 1.0, 1.0]
