"""Worker-side artifact I/O (runtime.storage, fsspec) on a local path and on S3 (moto on loopback):
data shards, preprocessing output and content hashes work the same wherever artifact_root points."""

from __future__ import annotations

import json

import numpy as np
import pytest

from airflow_ml_provider.runtime import preprocess, storage
from airflow_ml_provider.runtime.checkpoints import RESUME_ENV, Checkpoints
from airflow_ml_provider.runtime.datasets import load_npz_or_csv, save_npz, write_synthetic
from airflow_ml_provider.runtime.splits import file_sha256, split_dataset

pytestmark = pytest.mark.integration


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "ml")
    request.getfixturevalue("s3_worker_env")
    return f"s3://{request.getfixturevalue('bucket')}/ml"


def test_a_write_is_atomic_and_listed_and_hashed_the_same_everywhere(root, tmp_path):
    X = np.arange(12, dtype=np.float32).reshape(4, 3)
    where = save_npz(f"{root}/data/part-00001.npz", X=X, y=np.ones(4))
    save_npz(f"{root}/data/part-00000.npz", X=X[:1], y=np.zeros(1))
    assert where == f"{root}/data/part-00001.npz"
    assert storage.list_files(f"{root}/data") == [f"{root}/data/part-00000.npz", f"{root}/data/part-00001.npz"]
    np.savez(tmp_path / "same.npz", X=X, y=np.ones(4))
    with storage.local_copy(where) as local:
        assert open(local, "rb").read() == (tmp_path / "same.npz").read_bytes()
    assert file_sha256(where) == file_sha256(tmp_path / "same.npz")
    X_all, y_all = load_npz_or_csv(f"{root}/data")  # a directory of shards, in name order
    assert X_all.shape == (5, 3) and y_all.tolist() == [0, 1, 1, 1, 1]
    assert storage.list_files(f"{root}/nothing-here") == []


def test_a_missing_object_is_a_file_not_found_naming_it(root):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_npz_or_csv(f"{root}/missing.npz")
    with pytest.raises(FileNotFoundError, match="missing.keras"), storage.local_copy(f"{root}/missing.keras"):
        pass


def test_split_then_preprocess_a_shard_under_the_root(root, tmp_path, capsys):
    write_synthetic(f"{root}/source.npz", rows=600, features=4, seed=3)
    split = split_dataset(f"{root}/source.npz", f"{root}/run", shards=2)
    assert split["train"] == f"{root}/run/processed/shard-*/train-*.npz"
    assert all(path.startswith(f"{root}/run/raw/") for path in split["inputs"])
    first, output = split["inputs"][0], f"{root}/run/one/train-00000.npz"
    assert preprocess.main(["--input", first, "--output", output]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["rows_out"] == result["rows_in"] == len(load_npz_or_csv(output)[1])
    assert result["sha256"] == file_sha256(output)


def test_the_committed_parts_of_a_sharded_preprocessing_job_are_read_by_the_train_glob(root, monkeypatch):
    """``runtime.preprocess --shards`` commits each part under ``processed/shard-<i>/`` (on S3: the file, then the
    marker); the trainers' glob reads the train parts in shard order, the held-out paths name their parts."""
    from airflow_ml_provider.runtime.shards import committed

    write_synthetic(f"{root}/source.npz", rows=600, features=4, seed=3)
    split = split_dataset(f"{root}/source.npz", f"{root}/run", shards=3)
    monkeypatch.setenv("AIRFLOW_ML_SHARDS_OUTPUT", split["processed"])
    monkeypatch.setenv("AIRFLOW_ML_SHARD_COUNT", str(len(split["inputs"])))
    for index in reversed(range(len(split["inputs"]))):
        monkeypatch.setenv("AIRFLOW_ML_SHARD_INDEX", str(index))
        monkeypatch.setenv("AIRFLOW_ML_SHARD_INPUTS", json.dumps([split["inputs"][index]]))
        assert preprocess.main(["--shards"]) == 0 and committed(split["processed"], index)
    X, y = load_npz_or_csv(split["train"])
    raw = [load_npz_or_csv(path)[1] for path in split["inputs"][:3]]
    assert len(y) == 600 - 120 - 60 and np.array_equal(y, np.concatenate(raw))
    assert storage.glob_files(split["train"]) == [f"{split['processed']}/shard-{i:06d}/train-{i:05d}.npz"
                                                  for i in range(3)]
    assert len(load_npz_or_csv(split["test"])[1]) == 120 and len(load_npz_or_csv(split["valid"])[1]) == 60


def test_checkpoints_resume_from_the_environment_else_the_newest(root, monkeypatch, capsys):
    checkpoints = Checkpoints(f"{root}/ckpt", "ckpt", "npz")
    assert checkpoints.resume_from() is None
    for number in (2, 10, 3):
        checkpoints.save(number, lambda tmp: np.savez(tmp, x=np.zeros(1)), step=number)
    reported = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["path"] for e in reported] == [checkpoints.path(n) for n in (2, 10, 3)]
    assert checkpoints.latest() == (10, f"{root}/ckpt/ckpt-000010.npz")
    assert checkpoints.resume_from() == (f"{root}/ckpt/ckpt-000010.npz", f"latest checkpoint in {root}/ckpt")
    monkeypatch.setenv(RESUME_ENV, checkpoints.path(3))
    assert checkpoints.resume_from() == (checkpoints.path(3), RESUME_ENV)
    monkeypatch.setenv(RESUME_ENV, f"{root}/ckpt/ckpt-000099.npz")  # gone: fall back, and say so
    assert checkpoints.resume_from()[0] == checkpoints.path(10)
    assert "does not exist" in capsys.readouterr().err


def test_checkpoints_keep_the_newest_written_and_leave_another_attempts_and_series_alone(root):
    directory = f"{root}/ckpt"

    def write(tmp):
        np.savez(tmp, x=np.zeros(1))

    Checkpoints(directory, "other", "npz", keep=1).save(1, write)
    checkpoints = Checkpoints(directory, "ckpt", "npz", keep=2)
    checkpoints.save(9, write)  # an earlier attempt's, numbered above what this one writes next
    for number in (1, 2, 3):
        checkpoints.save(number, write, step=number)
    assert storage.list_files(directory) == [f"{directory}/{name}" for name in
                                             ("ckpt-000002.npz", "ckpt-000003.npz", "ckpt-000009.npz", "other-000001.npz")]
    Checkpoints(directory, "ckpt", "npz", keep=0).save(4, write)
    assert len(storage.list_files(directory)) == 5, "0 keeps all"
