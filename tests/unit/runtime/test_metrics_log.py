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


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_step_lines_are_a_burst_then_about_one_a_second_and_always_the_last():
    """Issue 45 D5: a 10,000-round job printed a line per round. 10,000 rounds over 100 s now print the burst,
    about one a second after it, and the last round's."""
    from airflow_ml_provider.runtime.metrics_log import StepLines

    clock = _Clock()
    lines = StepLines(interval_s=1.0, burst=50, clock=clock)
    shown = []
    for step in range(1, 10_001):
        clock.now = step / 100
        if lines.due(last=step == 10_000):
            shown.append(step)
    assert shown[:50] == list(range(1, 51)) and shown[-1] == 10_000
    assert 140 <= len(shown) <= 152, len(shown)  # 50 + ~100 s at one a second + the last
    gaps = [b - a for a, b in zip(shown[50:-2], shown[51:-1], strict=True)]
    assert min(gaps) >= 99, gaps  # 99-100 rounds (a second) apart after the burst


def test_a_progress_line_says_where_in_the_epoch_it_is(capsys):
    from airflow_ml_provider.runtime.metrics_log import emit_progress

    emit_progress(2, 30, 218, loss=np.float32(0.5))
    assert json.loads(capsys.readouterr().out) == {"event": "progress", "epoch": 2, "batch": 30, "batches": 218,
                                                   "loss": 0.5}
