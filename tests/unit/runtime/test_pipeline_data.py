"""Worker-side data steps of the pipeline: splitting, preprocessing a shard, shard directories."""

from __future__ import annotations

import json

import numpy as np
import pytest

from airflow_ml_provider.runtime import preprocess
from airflow_ml_provider.runtime.datasets import load_npz_or_csv, write_synthetic
from airflow_ml_provider.runtime.splits import file_sha256, split_dataset


def test_split_writes_disjoint_shards_and_held_out_sets(tmp_path):
    write_synthetic(tmp_path / "source.npz", rows=1000, features=4, seed=1)
    split = split_dataset(tmp_path / "source.npz", tmp_path / "out", shards=3)
    assert len(split["inputs"]) == 5 and split["n_classes"] == 2
    assert split["data_version"] == file_sha256(tmp_path / "source.npz")[:16]
    rows = [load_npz_or_csv(path)[0] for path in split["inputs"]]
    assert [len(r) for r in rows] == [234, 233, 233, 200, 100]  # 3 train shards, test (20%), valid (10%)
    seen = np.concatenate(rows)
    assert len(np.unique(seen, axis=0)) == 1000, "every row lands in exactly one part"
    processed = str(tmp_path / "out" / "processed")
    assert (split["processed"], split["train"]) == (processed, f"{processed}/shard-*/train-*.npz")
    assert [split["test"], split["valid"]] == [f"{processed}/shard-000003/test.npz", f"{processed}/shard-000004/valid.npz"]


def test_a_sharded_preprocessing_worker_cleans_each_part_into_its_shard_and_the_train_glob_reads_them(
        tmp_path, monkeypatch):
    """``--shards`` outside a launcher's stream runs the one shard its environment names (as a pod of an Indexed
    Job does), committing it under the layout ``split_dataset`` told the trainers; the glob reads the train parts
    committed, in shard order, and nothing of a try in progress (``.tmp``)."""
    from airflow_ml_provider.runtime.shards import committed

    write_synthetic(tmp_path / "source.npz", rows=300, features=4, seed=2)
    split = split_dataset(tmp_path / "source.npz", tmp_path / "out", shards=2)
    monkeypatch.setenv("AIRFLOW_ML_SHARDS_OUTPUT", split["processed"])
    monkeypatch.setenv("AIRFLOW_ML_SHARD_COUNT", "4")
    for index in (1, 0, 2, 3):
        monkeypatch.setenv("AIRFLOW_ML_SHARD_INDEX", str(index))
        monkeypatch.setenv("AIRFLOW_ML_SHARD_INPUTS", json.dumps([split["inputs"][index]]))
        assert preprocess.main(["--shards", "--clip", "1"]) == 0
        assert committed(split["processed"], index)
    marker = json.loads((tmp_path / "out" / "processed" / "shard-000002" / "_COMMITTED").read_text())
    assert marker["parts"] == [{"input": split["inputs"][2], "output": "test.npz", "rows_in": 60, "rows_out": 60,
                                "sha256": file_sha256(split["test"])}]
    (tmp_path / "out" / "processed" / ".tmp" / "shard-000005-x").mkdir(parents=True)
    np.savez(tmp_path / "out" / "processed" / ".tmp" / "shard-000005-x" / "train-00009.npz", X=np.ones((7, 4)),
             y=np.ones(7))
    X, y = load_npz_or_csv(split["train"])
    raw = [load_npz_or_csv(path) for path in split["inputs"][:2]]
    assert X.shape == (210, 4) and np.array_equal(y, np.concatenate([part[1] for part in raw]))
    assert np.abs(X).max() <= 1 and X.dtype == np.float32
    assert len(load_npz_or_csv(split["valid"])[1]) == 30


def test_the_preprocessing_worker_takes_one_part_or_the_shards_never_both(tmp_path, capsys):
    for argv in ([], ["--shards", "--input", "a.npz"], ["--input", "a.npz"]):
        with pytest.raises(SystemExit):
            preprocess.main(argv)
        assert "give --input and --output (one part), or --shards" in capsys.readouterr().err


def test_a_glob_that_matches_nothing_is_a_file_not_found_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="no .npz or .csv shard in glob"):
        load_npz_or_csv(f"{tmp_path}/shard-*/train-*.npz")


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
