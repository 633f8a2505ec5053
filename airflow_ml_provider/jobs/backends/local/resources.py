"""What each worker of a local job uses, sampled by its launcher: CPU and resident memory per rank.

Every ``EVERY_S`` seconds (the first ``FIRST_S`` after the workers start) the launcher writes one
``[launcher]`` line, ``{"event": "resources", "at": <epoch s>, "workers": {"0": {"cpu": 98.5, "mem_mib": 412.3,
"procs": 1}, ..., "launcher": {...}}}``: ``cpu`` in percent of one core since the last sample, ``mem_mib`` the
summed resident set; where NVML answers (``gpu_use``), ``gpu`` (percent of one GPU its processes keep busy) and
``gpu_mem_mib``. A process belongs to the rank its environment names (``AIRFLOW_ML_RANK``, set by the launcher;
``HOROVOD_RANK`` or ``RANK``, set by horovodrun and torchrun in the ranks they start); the launcher, horovodrun,
torchrun's agents and the sandbox's own processes count as ``launcher``. The follow core keeps the last sample
(``logs.metrics``, from the launcher's lines only) and the training view shows it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

from airflow_ml_provider.jobs.backends.local.gpu_use import GpuUse

FIRST_S = 3.0
EVERY_S = 15.0
RANK_KEYS = ("AIRFLOW_ML_RANK", "HOROVOD_RANK", "RANK")
LAUNCHER = "launcher"


class ResourceSampler:
    """A thread of the launcher writing a ``resources`` line per sample until ``finish``."""

    def __init__(self, find: Callable[[], list], write: Callable[[str, str], None],
                 first_s: float = FIRST_S, every_s: float = EVERY_S, clock: Callable[[], float] = time.time):
        self.find, self.write, self.first_s, self.every_s, self.clock = find, write, first_s, every_s, clock
        self._used: dict[tuple[int, float], tuple[float, float]] = {}  # (pid, created) -> (CPU s, when)
        self._gpus = GpuUse()  # NVML, opened at the first sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="resources", daemon=True)
        self._thread.start()

    def finish(self) -> None:
        self._stop.set()
        self._thread.join()
        self._gpus.close()

    def _run(self) -> None:
        wait = self.first_s
        while not self._stop.wait(wait):
            workers = self.sample()
            self.write(LAUNCHER, json.dumps({"event": "resources", "at": round(self.clock(), 1), "workers": workers}))
            wait = self.every_s

    def sample(self) -> dict[str, dict[str, float]]:
        """Per rank (and ``launcher``): CPU percent of one core since the last sample (for a process not seen
        before, since it started), resident MiB, process count; where NVML answers (``gpu_use``), the GPU percent
        its processes keep busy and the GPU memory they hold."""
        import psutil  # here, not at the launcher's start: its import is off every job's start-up path

        gpus = self._gpus.by_pid()
        workers: dict[str, dict[str, float]] = {}
        used = {}
        for proc in self.find():
            try:
                with proc.oneshot():
                    env, times, created = proc.environ(), proc.cpu_times(), proc.create_time()
                    rss = proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            now, seconds = self.clock(), times.user + times.system
            before, since = self._used.get((proc.pid, created), (0.0, created))
            used[proc.pid, created] = (seconds, now)
            rank = next((env[key] for key in RANK_KEYS if env.get(key, "").isdigit()), LAUNCHER)
            use = workers.setdefault(rank, {"cpu": 0.0, "mem_mib": 0.0, "procs": 0})
            use["cpu"] += 100 * (seconds - before) / max(now - since, 1e-3)
            use["mem_mib"] += rss / 2**20
            use["procs"] += 1
            if gpus is not None:  # a process on no GPU keeps none busy
                for key, value in gpus.get(proc.pid, {"gpu": 0.0, "gpu_mem_mib": 0.0}).items():
                    use[key] = use.get(key, 0.0) + value
        self._used = used
        return {rank: {key: value if key == "procs" else round(value, 1) for key, value in use.items()}
                for rank, use in sorted(workers.items(), key=lambda item: (item[0] == LAUNCHER, item[0].zfill(9)))}
