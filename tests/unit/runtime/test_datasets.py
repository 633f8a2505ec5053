"""Loading, sharding and generating the trainers' datasets."""

import numpy as np
import pytest

from airflow_ml_provider.runtime.datasets import (
    load_digits_split,
    load_npz_or_csv,
    main,
    shard,
    write_synthetic,
)


def test_load_npz(tmp_path):
    X, y = np.arange(6.0).reshape(3, 2), np.array([0.0, 1.0, 0.0])
    np.savez(tmp_path / "d.npz", X=X, y=y)
    X2, y2 = load_npz_or_csv(tmp_path / "d.npz")
    np.testing.assert_array_equal(X2, X)
    np.testing.assert_array_equal(y2, y)


def test_load_csv_takes_label_column_wherever_it_is(tmp_path):
    (tmp_path / "d.csv").write_text("a,label,b\n1,0,2\n3,1,4\n")
    X, y = load_npz_or_csv(tmp_path / "d.csv")
    np.testing.assert_array_equal(X, [[1, 2], [3, 4]])
    np.testing.assert_array_equal(y, [0, 1])


def test_load_csv_single_row(tmp_path):
    (tmp_path / "d.csv").write_text("a,label\n5,1\n")
    X, y = load_npz_or_csv(tmp_path / "d.csv")
    assert X.shape == (1, 1) and y.tolist() == [1]


@pytest.mark.parametrize(
    ("name", "content", "error", "match"),
    [
        ("missing.npz", None, FileNotFoundError, "not found"),
        ("d.csv", "a,b\n1,2\n", ValueError, "no 'label' column"),
        ("d.parquet", "x", ValueError, "unsupported data format"),
    ],
)
def test_load_rejects_bad_input(tmp_path, name, content, error, match):
    if content is not None:
        (tmp_path / name).write_text(content)
    with pytest.raises(error, match=match):
        load_npz_or_csv(tmp_path / name)


def test_shards_are_contiguous_and_cover_every_row_once():
    X, y = np.arange(22).reshape(11, 2), np.arange(11)
    parts = [shard(X, y, rank, 3) for rank in range(3)]
    assert [len(py) for _, py in parts] == [4, 4, 3]
    np.testing.assert_array_equal(np.concatenate([py for _, py in parts]), y)
    np.testing.assert_array_equal(np.concatenate([px for px, _ in parts]), X)


def test_shard_rejects_rank_out_of_range():
    with pytest.raises(ValueError, match="rank 2"):
        shard(np.zeros((4, 1)), np.zeros(4), 2, 2)


def test_write_synthetic_splits_and_is_seeded(tmp_path):
    write_synthetic(tmp_path / "t.npz", tmp_path / "v.npz", rows=500, features=6, seed=1)
    X, y = load_npz_or_csv(tmp_path / "t.npz")
    Xv, yv = load_npz_or_csv(tmp_path / "v.npz")
    assert X.shape == (400, 6) and Xv.shape == (100, 6)
    assert set(np.unique(y)) == {0, 1} and set(np.unique(yv)) == {0, 1}
    write_synthetic(tmp_path / "same.npz", rows=500, features=6, seed=1)
    write_synthetic(tmp_path / "other.npz", rows=500, features=6, seed=2)
    same, _ = load_npz_or_csv(tmp_path / "same.npz")
    other, _ = load_npz_or_csv(tmp_path / "other.npz")
    np.testing.assert_array_equal(same, np.concatenate([X, Xv]))
    assert not np.array_equal(same, other)


def test_cli_writes_train_and_valid(tmp_path):
    argv = ["synthetic", "--rows", "300", "--features", "4", "--seed", "0"]
    assert main([*argv, "--out", str(tmp_path / "t.npz"), "--valid-out", str(tmp_path / "v.npz")]) == 0
    assert load_npz_or_csv(tmp_path / "t.npz")[0].shape == (240, 4)
    assert load_npz_or_csv(tmp_path / "v.npz")[0].shape == (60, 4)


def test_digits_split_is_scaled_stratified_and_seeded():
    X_train, y_train, X_test, y_test = load_digits_split(0)
    assert len(X_train) + len(X_test) == 1797 and X_train.shape[1] == 64
    assert X_train.dtype == np.float32 and X_train.min() == 0.0 and X_train.max() == 1.0
    assert set(y_test.tolist()) == set(range(10))
    np.testing.assert_array_equal(load_digits_split(0)[1], y_train)
    assert not np.array_equal(load_digits_split(1)[1], y_train)
    for digit in range(10):  # a fifth of each digit held out
        assert np.sum(y_test == digit) == round((np.sum(y_train == digit) + np.sum(y_test == digit)) / 5)


def test_digits_split_is_scikit_learns_digits_every_row_once():
    from sklearn.datasets import load_digits

    X_train, y_train, X_test, y_test = load_digits_split(0)
    X, y = load_digits(return_X_y=True)
    ours = np.column_stack([np.concatenate([X_train, X_test]) * 16, np.concatenate([y_train, y_test])])
    theirs = np.column_stack([X, y]).astype(np.float32)
    np.testing.assert_array_equal(ours[np.lexsort(ours.T)], theirs[np.lexsort(theirs.T)])
