"""What a local job's processes use of the machine's NVIDIA GPUs, through NVML (nvidia-ml-py's ``pynvml``, the
``gpu`` extra), for the launcher's resources sample (``resources``): per process, its SM utilisation (percent of
one GPU, summed over the GPUs it runs on) and the GPU memory it holds.

pynvml is imported, and NVML initialised, on the first sample only (never on the launcher's start path), once:
where the package, the driver's ``libnvidia-ml.so.1`` or a GPU is missing (``nvmlInit`` raises NVMLError, as
NVML_ERROR_LIBRARY_NOT_FOUND on a machine without the driver: nvidia-ml-py 13.615.71 pynvml.py:3165-3195), the
sample has no GPU figures and nothing is raised. A process's utilisation is NVML's per-process samples since the
last read (``nvmlDeviceGetProcessUtilization``, pynvml.py:5741-5761, ``smUtil`` of c_nvmlProcessUtilizationSample_t,
:1755-1763); where the device keeps none, a device running one process gives it the device's own utilisation
(``nvmlDeviceGetUtilizationRates``), and several sharing it get no figure. Memory is ``usedGpuMemory`` of
``nvmlDeviceGetComputeRunningProcesses`` (None where NVML cannot say, pynvml.py:4228-4260). Not run on GPU hardware
in this project's tests: only the path where NVML cannot initialise is.
"""

from __future__ import annotations

from typing import Any


class GpuUse:
    """NVML, opened on the first ``by_pid``; ``close`` shuts it down."""

    def __init__(self):
        self._nvml: Any = None  # the pynvml module once initialised; False: NVML cannot be used here
        self._seen: dict[int, int] = {}  # device index -> the newest process-utilisation sample read (NVML time)

    def by_pid(self) -> dict[int, dict[str, float]] | None:
        """``{pid: {"gpu": percent, "gpu_mem_mib": MiB}}`` of every process on a GPU now (``gpu`` only where NVML
        can say); None where NVML cannot be used (no GPU figures at all), ``{}`` where no process runs on a GPU."""
        if self._nvml is None:
            self._nvml = _initialised()
        if not self._nvml:
            return None
        nvml = self._nvml
        use: dict[int, dict[str, float]] = {}
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                self._device(nvml, index, use)
        except nvml.NVMLError:  # a device gone or failing mid-read: no GPU figures this time
            return None
        return use

    def _device(self, nvml: Any, index: int, use: dict[int, dict[str, float]]) -> None:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, self._seen.get(index, 0))
        except nvml.NVMLError:  # not supported by the device, or no sample since the last read
            samples = []
        busy = {sample.pid: float(sample.smUtil) for sample in samples}
        self._seen[index] = max((sample.timeStamp for sample in samples), default=self._seen.get(index, 0))
        if not busy and len(processes) == 1:
            busy[processes[0].pid] = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        for process in processes:
            entry = use.setdefault(process.pid, {"gpu_mem_mib": 0.0})
            entry["gpu_mem_mib"] += (process.usedGpuMemory or 0) / 2**20
            if process.pid in busy:
                entry["gpu"] = entry.get("gpu", 0.0) + busy[process.pid]

    def close(self) -> None:
        if self._nvml:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
        self._nvml = False


def _initialised() -> Any:
    """pynvml with NVML initialised and at least one GPU, else False."""
    try:
        import pynvml  # here, at the first sample: the launcher's start never imports it
    except ImportError:
        return False
    try:
        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() > 0:
            return pynvml
        pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        pass
    return False
