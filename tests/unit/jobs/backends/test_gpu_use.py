"""GPU use in a local job's resources sample where NVML cannot initialise, as on this machine (no NVIDIA driver:
nvidia-ml-py's real ``nvmlInit`` fails): no GPU figures at all, nothing raised, the CPU and memory sample as
before. The path where NVML answers (a GPU and its driver) is not run by these tests: no machine here has one."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from airflow_ml_provider.jobs.backends.local.gpu_use import GpuUse
from airflow_ml_provider.jobs.backends.local.resources import ResourceSampler


def _nvml_fails_here() -> Exception:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return exc
    pynvml.nvmlShutdown()
    pytest.skip("NVML initialises on this machine (a GPU and its driver): this test is of a machine without")


def test_without_nvml_a_rank_s_sample_has_no_gpu_figures_and_nothing_is_raised():
    _nvml_fails_here()
    rank = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                            env={"AIRFLOW_ML_RANK": "0", "PATH": "/usr/bin:/bin"}, stdout=subprocess.PIPE, text=True)
    assert rank.stdout.readline() == "up\n"  # its interpreter runs: sampled before, it was a fork of 0.2 MiB
    sampler = ResourceSampler(lambda: [psutil.Process(rank.pid)], lambda *_: None, first_s=3600)
    try:
        workers = sampler.sample()
        assert set(workers) == {"0"} and set(workers["0"]) == {"cpu", "mem_mib", "procs"}, workers
        assert workers["0"]["mem_mib"] > 1 and workers["0"]["procs"] == 1
        assert sampler.sample()["0"].keys() == {"cpu", "mem_mib", "procs"}  # NVML is not tried again, nor raises
    finally:
        sampler.finish()
        rank.kill()
        rank.wait()
        rank.stdout.close()


def test_nvml_that_cannot_initialise_is_no_gpu_and_is_asked_once():
    _nvml_fails_here()
    gpus = GpuUse()
    assert gpus.by_pid() is None and gpus.by_pid() is None
    gpus.close()
