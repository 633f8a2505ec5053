"""How every backend's ``horovodrun`` finds its workers: a fixed host list, or for an elastic job
(``min_workers``/``max_workers``) size bounds, Gloo's timeout and a discovery command that lists the workers that
can take a rank (every Kubernetes launcher's here: the job's Ready worker pods; the local launcher's reads the
job's slots in etcd). The twin of ``torchrun`` for PyTorch jobs."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_ml_provider.jobs.spec import TrainingJobSpec

# Gloo's timeout in an elastic job, on every backend: the longest a re-forming ring waits for a joining worker's
# process to start and reach it (importing TensorFlow alone takes 4-10 s, 20+ s on a loaded machine, more with
# CUDA to initialize; past it every rank aborts), and the longest a survivor may wait on a peer that is gone
# (Horovod 0.28.1's survivors learn of a loss only when a receive expires). A slower recovery is cheaper than a
# failed job; the measurements behind the value are in docs/testing.md.
ELASTIC_GLOO_TIMEOUT_S = 120
# horovodrun's --start-timeout, on every backend: how long its checks and the start of every worker's task service
# may take before the launch fails. Horovod's default, 30 s, was too short for two task services on a loaded
# two-core machine (the image tests' Volcano job: "Timed out waiting for tasks to start ... 30 seconds").
START_TIMEOUT_S = 120


def horovodrun_hosts(spec: TrainingJobSpec, fixed: list[str], discovery: str, slots: int) -> list[str]:
    """``fixed`` (the options naming the workers) for a fixed-size job; ``--min-np/--max-np/--host-discovery-script``,
    the Gloo timeout and ``--slots-per-host`` for an elastic one, whose workers hold ``slots`` ranks each; and
    for both, the start timeout.

    ``--slots-per-host`` is what a discovery line without ``:<slots>`` counts as: Horovod 0.28.1's
    ``HostDiscoveryScript.find_available_hosts_and_slots`` (horovod/runner/elastic/discovery.py:238-252) gives
    such a host ``self._default_slots``, which is ``args.slots`` (runner/launch.py:448, 692), None without the
    option, and summing None slots raised TypeError: the MPI operator's discover_hosts.sh, which elastic MPIJobs
    ran before the pod discovery, prints bare host names (kubeflow/mpi-operator v0.8.0
    pkg/controller/mpi_job_controller.go:1376-1378, ``echo <pod>.<job>.<ns>.svc``). Where the script prints
    ``host:slots`` (the local and pod discovery, every backend's now) its value wins."""
    start = ["--start-timeout", str(START_TIMEOUT_S)]
    if not spec.elastic:
        return [*fixed, *start]
    low, high = spec.min_workers or spec.num_workers, spec.max_workers or spec.num_workers
    return ["--min-np", str(low * slots), "--max-np", str(high * slots), "--host-discovery-script", discovery,
            "--gloo-timeout-seconds", str(ELASTIC_GLOO_TIMEOUT_S), "--slots-per-host", str(slots), *start]


def pod_discovery(selector: str, slots: int) -> str:
    """The discovery command of every Kubernetes backend's elastic launcher: the Ready pods that ``selector``
    (the backend's labels of this job's worker pods) matches, read from the API (see runtime.pod_discovery)."""
    return shlex.join(["python", "-m", "airflow_ml_provider.runtime.pod_discovery", "--selector", selector,
                       "--slots", str(slots)])
