"""Operator arguments: bad specs fail without retry and name the field; templated fields render."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.operators.base_job import spec_on
from airflow_ml_provider.operators.training import HorovodTrainingOperator, LightGBMTrainingOperator


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"command": ["python", "train.py"], "num_workers": 0}, "num_workers"),
        ({"command": [], "num_workers": 2}, "command"),
        ({"command": "python train.py; rm -rf /", "num_workers": 2}, "command"),
    ],
)
def test_bad_specs_fail_the_task_without_retry(kwargs, field, tmp_path):
    operator = HorovodTrainingOperator(task_id="train", **kwargs)
    with pytest.raises(AirflowFailException, match=rf"train: TrainingJobSpec\.{field}"):
        spec_on(operator, LocalBackend(tmp_path), "job")


def test_lightgbm_operator_passes_data_and_params_as_argv_data(tmp_path):
    operator = LightGBMTrainingOperator(task_id="lgbm", train_data="/d/train; rm -rf /.npz",
                                        lightgbm_params={"num_leaves": 7}, num_boost_round=5, num_workers=2)
    spec = spec_on(operator, LocalBackend(tmp_path), "job")
    assert spec.command[:3] == ["python", "-m", "airflow_ml_provider.runtime.lightgbm_trainer"]
    assert spec.command[spec.command.index("--train-data") + 1] == "/d/train; rm -rf /.npz"
    assert spec.command[spec.command.index("--params-json") + 1] == '{"num_leaves": 7}'
    assert spec.model_dir == str(tmp_path / "artifacts" / "job" / "model")
    assert set(LightGBMTrainingOperator.template_fields) >= {"train_data", "valid_data", "lightgbm_params", "command"}
