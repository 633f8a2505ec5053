"""The bundled PyTorch trainer on a GPU: nccl for every collective, a checkpoint resumed on the GPU and
on a CPU, the GPU-trained ``model.pt`` scored on a CPU. Runs only where the training environment's torch
sees a GPU (skipped on CPU machines, CI among them). Needs no Airflow, so a GPU host without it runs it
alone: ``python -m pytest --noconftest tests/integration/pytorch/test_trainer_on_gpu.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
TRAINER = "airflow_ml_provider.runtime.torch_ddp"


def _python() -> str:
    """The training environment's interpreter (the local backend's image), else this one."""
    image = Path(os.environ.get("AIRFLOW_ML_LOCAL_IMAGE", REPO / ".venv-train"))
    return str(image / "bin" / "python") if (image / "bin" / "python").exists() else sys.executable


def _run(argv: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env})


def _train(epochs: int, checkpoints: Path, model: Path, **env: str) -> tuple[str, list[dict]]:
    """One rank under torchrun; its output and its structured lines."""
    done = _run([_python(), "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", "--no-python",
                 _python(), "-m", TRAINER, "--epochs", str(epochs), "--checkpoint-dir", str(checkpoints),
                 "--model-dir", str(model)], NCCL_DEBUG="VERSION", **env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    output = done.stdout + done.stderr
    return output, [json.loads(line) for line in output.splitlines() if line.startswith('{"')]


@pytest.fixture(scope="module")
def gpu() -> None:
    probe = _run([_python(), "-c", "import torch; print(torch.cuda.is_available())"])
    if probe.stdout.strip() != "True":
        pytest.skip(f"no GPU for the training environment's torch ({_python()})")


def _of(events: list[dict], kind: str) -> list[dict]:
    return [event for event in events if event["event"] == kind]


def test_the_trainer_runs_on_nccl_and_its_checkpoints_resume_on_gpu_and_cpu(gpu, tmp_path):
    checkpoints = tmp_path / "checkpoints"
    output, events = _train(2, checkpoints, tmp_path / "model")
    assert "NCCL version" in output  # the process group is nccl's (it prints its version when it starts)
    assert [e["epoch"] for e in _of(events, "metrics")] == [1, 2]
    assert _of(events, "result")[0]["accuracy"] > 0.5

    output, events = _train(3, checkpoints, tmp_path / "model")  # on the GPU, from epoch 2's checkpoint
    assert [e["epoch"] for e in _of(events, "resumed")] == [2]
    assert [e["epoch"] for e in _of(events, "metrics")] == [3]

    output, events = _train(4, checkpoints, tmp_path / "cpu-model", CUDA_VISIBLE_DEVICES="")  # on a CPU
    assert "NCCL version" not in output  # gloo
    assert [e["epoch"] for e in _of(events, "resumed")] == [3]
    assert [e["epoch"] for e in _of(events, "metrics")] == [4]


def test_a_model_trained_on_a_gpu_scores_on_a_cpu(gpu, tmp_path):
    _train(3, tmp_path / "checkpoints", tmp_path / "model")
    score = ("import numpy as np, torch, sys\n"
             "from airflow_ml_provider.runtime.datasets import load_digits_split\n"
             "from airflow_ml_provider.runtime.predict import load_torch_mlp\n"
             "_, _, X, y = load_digits_split(0)\n"
             "model = load_torch_mlp(sys.argv[1])\n"
             "print((model(torch.from_numpy(X.astype(np.float32))).argmax(1).numpy() == y).mean())\n")
    done = _run([_python(), "-c", score, str(tmp_path / "model" / "model.pt")], CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 0, done.stderr[-3000:]
    assert float(done.stdout) > 0.8
