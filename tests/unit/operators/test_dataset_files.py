"""What an input dataset is, as BatchScoringOperator lists it: a folder's, a glob's or one file's data files, in
name order, every one of them inside the data roots once links are resolved."""

from __future__ import annotations

import os

import pytest

from airflow_ml_provider.operators.dataset import dataset_files, folder


@pytest.fixture
def root(tmp_path):
    data = tmp_path / "data"
    (data / "ds").mkdir(parents=True)
    for name in ("b.parquet", "a.csv", "c.npz", "notes.txt"):
        (data / "ds" / name).write_text("x")
    return data


def test_a_folder_lists_its_data_files_in_name_order(root):
    assert dataset_files(str(root / "ds"), [str(root)]) == [str(root / "ds" / n) for n in ("a.csv", "b.parquet",
                                                                                           "c.npz")]


def test_a_glob_and_a_single_file(root):
    assert dataset_files(str(root / "ds" / "*.parquet"), [str(root)]) == [str(root / "ds" / "b.parquet")]
    assert dataset_files(str(root / "ds" / "c.npz"), [str(root)]) == [str(root / "ds" / "c.npz")]
    assert folder(str(root / "ds" / "part-*.parquet")) == str(root / "ds")
    assert folder(str(root / "ds" / "c.npz")) == str(root / "ds")


def test_outside_the_data_roots_is_refused_naming_the_field(root, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(ValueError, match=r"^input: .* is outside the data roots"):
        dataset_files(str(tmp_path / "elsewhere"), [str(root)])
    with pytest.raises(ValueError, match=r"^input: .* is outside the data roots"):
        dataset_files(str(root / "ds" / ".." / ".."), [str(root)])
    with pytest.raises(ValueError, match="not an absolute path"):
        dataset_files("ds", [str(root)])
    with pytest.raises(ValueError, match="not a folder, object-storage prefix or glob"):
        dataset_files("/x\n/y", [str(root)])


def test_a_link_that_leads_out_of_the_roots_is_refused(root, tmp_path):
    secret = tmp_path / "secret.csv"
    secret.write_text("x")
    os.symlink(secret, root / "ds" / "z.csv")
    with pytest.raises(ValueError, match=r"1 file\(s\) of .* lead out of the data roots \(through a link\)"):
        dataset_files(str(root / "ds"), [str(root)])


def test_a_folder_without_data_files_is_refused(root):
    (root / "empty").mkdir()
    with pytest.raises(ValueError, match=r"^input: no \.parquet, \.csv, \.npz file in"):
        dataset_files(str(root / "empty"), [str(root)])
