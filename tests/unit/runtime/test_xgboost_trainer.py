"""The bundled XGBoost trainer's parameters and usage errors, and its resume on one real process: a second run
over the same checkpoint directory continues from the saved booster and trains only the missing rounds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from airflow_ml_provider.runtime import xgboost_trainer

xgb = pytest.importorskip("xgboost")  # the training environment's; the control env has none


def test_defaults_are_hist_one_thread_and_a_users_alias_wins():
    assert xgboost_trainer.build_params({}) == {"nthread": 1, "tree_method": "hist", "objective": "binary:logistic",
                                                "eval_metric": ["logloss", "auc"]}
    params = xgboost_trainer.build_params({"n_jobs": 4, "objective": "reg:squarederror", "tree_method": "approx"})
    assert "nthread" not in params and params["n_jobs"] == 4 and params["tree_method"] == "approx"
    assert "eval_metric" not in params


def test_a_resumed_run_trains_only_the_missing_rounds(tmp_path, monkeypatch, capsys):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 5))
    np.savez(tmp_path / "train.npz", X=X, y=(X[:, 0] > 0).astype(int))
    for name in ("AIRFLOW_ML_RANK", "AIRFLOW_ML_NUM_WORKERS", "DMLC_TRACKER_URI", "DMLC_TASK_ID", "AIRFLOW_ML_RESUME_FROM"):
        monkeypatch.delenv(name, raising=False)
    args = ["--train-data", str(tmp_path / "train.npz"), "--valid-data", str(tmp_path / "train.npz"),
            "--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every", "4", "--model-dir", str(tmp_path / "m")]
    assert xgboost_trainer.main([*args, "--num-boost-round", "8"]) == 0
    capsys.readouterr()
    assert xgboost_trainer.main([*args, "--num-boost-round", "12"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    [resumed] = [line for line in lines if line["event"] == "resumed"]
    assert resumed["step"] == 8 and resumed["path"].endswith("booster-000008.json")
    assert [line["step"] for line in lines if line["event"] == "metrics"] == [9, 10, 11, 12]
    assert xgb.Booster(model_file=str(tmp_path / "m" / "model.ubj")).num_boosted_rounds() == 12


def test_usage_errors_exit_2_with_one_line(tmp_path, capsys):
    assert xgboost_trainer.main(["--train-data", str(tmp_path / "missing.npz")]) == 2
    assert capsys.readouterr().err.startswith("xgboost_trainer: error: ")
    assert xgboost_trainer.main(["--train-data", "x.npz", "--params-json", "[1]"]) == 2
