"""The local launcher starts before every local job (its start is on the path of the PyTorch and Horovod
overhead targets, docs/benchmarks.md): its process imports neither pydantic (~60 ms: the job spec and the
sharded runner are imported only where needed) nor Airflow, nor what its resources sampler imports at its first
sample (psutil, and NVML's pynvml). Read from a fresh interpreter's ``sys.modules``."""

from __future__ import annotations

import json
import subprocess
import sys

IMPORTED = ("import json, sys; import airflow_ml_provider.jobs.backends.local.launcher; "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")


def test_the_launcher_process_imports_neither_pydantic_nor_airflow():
    done = subprocess.run([sys.executable, "-c", IMPORTED], capture_output=True, text=True, check=True)
    top_level = set(json.loads(done.stdout))
    assert "airflow_ml_provider" in top_level
    assert not top_level & {"pydantic", "pydantic_core", "airflow", "pynvml", "psutil"}, sorted(top_level)
