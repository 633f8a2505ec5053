"""TensorFlow's start-up notices stay out of a trainer's output unless asked for; other stderr lines pass.
Real TensorFlow, imported in the training environment as the bundled Horovod trainers do."""

from __future__ import annotations

import os
import subprocess

import pytest

from airflow_ml_provider.runtime.quiet import NOISE
from support import TRAINING_PYTHON, needs_training_env

pytestmark = [pytest.mark.integration, needs_training_env]

IMPORT = """
import sys
from airflow_ml_provider.runtime.quiet import quiet_startup
with quiet_startup():
    import tensorflow
    print("a line of the trainer's own", file=sys.stderr)
print("imported", tensorflow.__version__)
"""


def _run(**env: str) -> subprocess.CompletedProcess:
    clean = {
        k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "AIRFLOW_ML_TF_STARTUP_LOGS")
    }
    return subprocess.run(
        [TRAINING_PYTHON, "-c", IMPORT], env={**clean, **env}, capture_output=True, text=True, check=True
    )


def test_the_notices_are_filtered_and_other_lines_kept():
    done = _run()
    assert "imported" in done.stdout
    assert done.stderr.splitlines() == ["a line of the trainer's own"]


def test_the_option_shows_them():
    stderr = _run(AIRFLOW_ML_TF_STARTUP_LOGS="1").stderr.splitlines()
    assert "a line of the trainer's own" in stderr
    assert sum(bool(NOISE.match(line)) for line in stderr) >= 2  # absl's notice, oneDNN's
