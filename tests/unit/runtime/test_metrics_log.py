"""The structured-line contract: one sorted JSON object per line, and the worker's environment."""

import dataclasses
import json

import numpy as np
import pytest

from airflow_ml_provider.runtime.metrics_log import EVENT_KEY, WorkerEnv, emit, emit_metrics, worker_env

ENV_VARS = [
    "AIRFLOW_ML_RANK",
    "JOB_COMPLETION_INDEX",
    "AIRFLOW_ML_NUM_WORKERS",
    "AIRFLOW_ML_MACHINES",
    "AIRFLOW_ML_LOCAL_PORT",
    "AIRFLOW_ML_MODEL_DIR",
    "AIRFLOW_ML_CHECKPOINT_DIR",
]


@pytest.fixture
def clean_env(monkeypatch):
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_emit_prints_one_sorted_json_line(capsys):
    emit("checkpoint", path="/ckpt/ckpt-000001.npz", epoch=1)
    out = capsys.readouterr().out
    assert out == '{"epoch": 1, "event": "checkpoint", "path": "/ckpt/ckpt-000001.npz"}\n'
    assert json.loads(out)[EVENT_KEY] == "checkpoint"


def test_emit_metrics_converts_numpy_scalars(capsys):
    emit_metrics(step=np.int64(3), loss=np.float32(0.25), accuracy=np.float64(0.5))
    line = json.loads(capsys.readouterr().out)
    assert line == {"event": "metrics", "step": 3, "loss": 0.25, "accuracy": 0.5}
    assert type(line["step"]) is int and type(line["loss"]) is float


def test_each_emit_is_its_own_line(capsys):
    emit("a", x=1)
    emit("b", text="multi\nline")
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["a", "b"]


def test_worker_env_defaults(clean_env):
    assert worker_env() == WorkerEnv(
        rank=0, num_workers=1, machines=[], local_port=None, model_dir=None, checkpoint_dir=None
    )


def test_worker_env_reads_every_variable(clean_env):
    clean_env.setenv("AIRFLOW_ML_RANK", "1")
    clean_env.setenv("JOB_COMPLETION_INDEX", "7")
    clean_env.setenv("AIRFLOW_ML_NUM_WORKERS", "2")
    clean_env.setenv("AIRFLOW_ML_MACHINES", "10.0.0.1:12400, 10.0.0.2:12400")
    clean_env.setenv("AIRFLOW_ML_LOCAL_PORT", "12400")
    clean_env.setenv("AIRFLOW_ML_MODEL_DIR", "/models")
    clean_env.setenv("AIRFLOW_ML_CHECKPOINT_DIR", "/ckpt")
    env = worker_env()
    assert env == WorkerEnv(
        rank=1,
        num_workers=2,
        machines=["10.0.0.1:12400", "10.0.0.2:12400"],
        local_port=12400,
        model_dir="/models",
        checkpoint_dir="/ckpt",
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        env.rank = 0


def test_worker_env_falls_back_to_job_completion_index(clean_env):
    clean_env.setenv("JOB_COMPLETION_INDEX", "3")
    assert worker_env().rank == 3


def test_an_epoch_metrics_line_names_its_epoch_not_a_step(capsys):
    from airflow_ml_provider.runtime.metrics_log import emit_epoch_metrics

    emit_epoch_metrics(np.int64(2), loss=np.float32(0.5), accuracy=0.75)
    assert json.loads(capsys.readouterr().out) == {"event": "metrics", "epoch": 2, "loss": 0.5, "accuracy": 0.75}
