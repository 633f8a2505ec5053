"""runtime.shards outside a launcher's stream (a run by hand, a pod of an Indexed Job): serve() runs the one shard
its environment names and commits it once, in a local folder (a rename) or on object storage (its files, then
the marker), and a shard already committed is skipped. fsspec's in-memory filesystem stands for object storage."""

from __future__ import annotations

import json
import os
import uuid

import fsspec
import pytest

from airflow_ml_provider.operators.dataset import dataset_files
from airflow_ml_provider.runtime import shards


@pytest.fixture
def one_shard(monkeypatch):
    def set_up(root: str, index: int) -> None:
        monkeypatch.delenv(shards.STREAM_ENV, raising=False)
        monkeypatch.setenv(shards.ROOT_ENV, root)
        monkeypatch.setenv(shards.COUNT_ENV, "10")
        monkeypatch.setenv(shards.INDEX_ENV, str(index))
        monkeypatch.setenv(shards.INPUTS_ENV, json.dumps([f"/data/{index}.parquet"]))
    return set_up


def _write(calls: list):
    def fn(shard: shards.Shard) -> int:
        calls.append(shard.index)
        with open(os.path.join(shard.output, "out.txt"), "w") as f:
            f.write(f"{shard.index} {shard.inputs}")
        return 3
    return fn


def test_a_shard_run_by_hand_is_committed_once_in_a_local_folder(tmp_path, one_shard):
    one_shard(str(tmp_path), 4)
    calls: list = []
    assert shards.serve(_write(calls)) == 0
    final = tmp_path / "shard-000004"
    assert (final / "out.txt").read_text() == "4 ['/data/4.parquet']"
    assert json.loads((final / "_COMMITTED").read_text())["rows"] == 3
    assert not list((tmp_path / ".tmp").iterdir()), "the try's folder became the shard"
    assert shards.serve(_write(calls)) == 0 and calls == [4], "committed: skipped the second time"


def test_on_object_storage_the_files_are_uploaded_then_the_marker(one_shard):
    root = f"memory://bucket/{uuid.uuid4().hex}"  # (the in-memory store lives as long as the process)
    one_shard(root, 7)
    calls: list = []
    assert shards.serve(_write(calls)) == 0
    fs = fsspec.filesystem("memory")
    assert fs.cat(f"{root.removeprefix('memory:/')}/shard-000007/out.txt") == b"7 ['/data/7.parquet']"
    assert shards.committed(root, 7) and not shards.committed(root, 6)
    assert shards.serve(_write(calls)) == 0 and calls == [7]


def test_a_failing_shard_commits_nothing_and_exits_non_zero(tmp_path, one_shard):
    one_shard(str(tmp_path), 1)

    def fails(shard):
        raise RuntimeError("bad input")

    assert shards.serve(fails) == 1
    assert not shards.committed(str(tmp_path), 1) and not list((tmp_path / ".tmp").iterdir())


def test_an_object_storage_prefix_lists_its_data_files():
    fs = fsspec.filesystem("memory")
    for name in ("b.parquet", "a.parquet", "readme.md"):
        fs.pipe(f"/datasets/day1/{name}", b"x")
    assert dataset_files("memory://datasets/day1", []) == ["memory:///datasets/day1/a.parquet",
                                                           "memory:///datasets/day1/b.parquet"]
    assert dataset_files("memory://datasets/day1/b*", []) == ["memory:///datasets/day1/b.parquet"]
