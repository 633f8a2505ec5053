"""The local launcher starts before every local job (its start is on the path of the PyTorch and Horovod
overhead targets, docs/benchmarks.md): its process imports neither pydantic (~60 ms: the job spec and the
sharded runner are imported only where needed) nor Airflow, nor what its resources sampler imports at its first
sample (psutil, and NVML's pynvml), nor what only some jobs or a failure need (the XGBoost tracker's argparse and
socket, the roles runner, traceback, logging, platform, the owner token's hashlib and hmac). Read from a fresh interpreter's ``sys.modules``."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from airflow_ml_provider.jobs.backends.local import sandboxed

IMPORTED = ("import json, sys; import airflow_ml_provider.jobs.backends.local.launcher; "
            "print(json.dumps(sorted(sys.modules)))")


def test_the_launcher_process_imports_only_what_every_job_needs():
    done = subprocess.run([sys.executable, "-c", IMPORTED], capture_output=True, text=True, check=True)
    modules = set(json.loads(done.stdout))
    top_level = {module.split(".")[0] for module in modules}
    assert "airflow_ml_provider" in top_level
    assert not top_level & {"pydantic", "pydantic_core", "airflow", "pynvml", "psutil", "argparse", "logging",
                            "platform", "traceback", "hashlib", "hmac", "secrets"}, sorted(top_level)
    assert not modules & {"airflow_ml_provider.runtime.xgboost_tracker", "airflow_ml_provider.jobs.xgboost",
                          "airflow_ml_provider.jobs.backends.local.roles", "airflow_ml_provider.jobs.roles"}


def test_the_sandboxs_spawner_imports_neither_json_nor_subprocess_nor_socket():
    """The spawner starts in every job's sandbox: a plan in ``marshal`` (no ``json``, whose ``re`` is most of
    its import), workers by ``posix_spawn`` (no ``subprocess``), ``socket`` only for a job with relays."""
    imported = ("import sys; sys.path.insert(0, sys.argv[1]); before = set(sys.modules); import spawner; "
                "print(sorted(set(sys.modules) - before))")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", imported, str(Path(sandboxed.SPAWNER).parent)],
                          capture_output=True, text=True, check=True)
    added = set(ast.literal_eval(done.stdout))
    assert "spawner" in added
    assert not added & {"json", "subprocess", "socket", "selectors", "re"}, sorted(added)
