"""What a job's pods use, from the cluster's resource metrics API (``metrics.k8s.io/v1beta1`` PodMetrics, served
by metrics-server): one list of the namespace's PodMetrics with the job's label selector, turned into the
training view's resources sample (``{"worker 0": {"cpu": 98.5, "mem_mib": 412.3, "pods": 1}, ...}``, as the
local launcher's: ``cpu`` in percent of one core, ``mem_mib`` the pods' working set).

A worker is named by its role (the pods' ``ml.airflow.apache.org/role`` label) and its index: the Job
controller's completion-index label (Indexed Jobs, JobSet's), else the number the controller puts in the pod's
name (``<job>-worker-3``, ``<job>-ps-1``, ``<job>-2-x7k2p``); the MPIJob's launcher is ``launcher``. A cluster
without the API (404) or a refusal (401/403) raises ``ResourcesUnavailable`` once, in our own words; overload,
server errors and dropped connections mean no sample this time (None).
"""

from __future__ import annotations

import math
import re
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from airflow_ml_provider.jobs.backends.base import ResourcesUnavailable
from airflow_ml_provider.jobs.backends.kubernetes.pod_template import ROLE_LABEL
from airflow_ml_provider.jobs.backends.kubernetes.rest import OBJECT, REFUSED

PODS = "/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # the Job controller's pod label (Kubernetes 1.28+)
NO_API = ("the cluster serves no metrics.k8s.io (no metrics-server): the pods' CPU and memory are not shown; "
          "not asked again for this job")
REFUSED_NOTE = ("the cluster refused to list metrics.k8s.io pods ({status}): grant get and list on them "
                "(deploy/kubernetes/rbac.yaml) to see the pods' CPU and memory; not asked again for this job")
MAX_WORKERS = 1024
# Kubernetes' quantity format (k8s.io/apimachinery pkg/api/resource/quantity.go:40-58, suffixes suffix.go:113-132)
_QUANTITY = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:[eE]([+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?")
_SCALE = {"n": 1e-9, "u": 1e-6, "m": 1e-3, None: 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
          "E": 1e18, **{suffix: 1024.0 ** (i + 1) for i, suffix in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))}}
_ROLE = re.compile(r"[a-z][a-z0-9-]{0,30}")  # a role label's value we name a worker by
_LEADING_WORD = re.compile(r"[a-z][a-z0-9]*(?:-[a-z][a-z0-9]*)*")  # "worker" of "worker-3", "node" of "node-0-1-x7k2p"
_INDEX = re.compile(r"(?:^|-)(\d{1,6})(?:-[a-z0-9]{5})?$")  # a pod's index, before the Job controller's suffix


def quantity(text: Any) -> float | None:
    """A Kubernetes quantity (``"123456n"``, ``"250m"``, ``"1234Ki"``, ``"1.5Gi"``, ``"1e3"``) as a number of base
    units (cores, bytes); None for anything else."""
    if not isinstance(text, str) or not (match := _QUANTITY.fullmatch(text.strip())):
        return None
    number, exponent, suffix = match.groups()
    value = float(number) * (10.0 ** int(exponent) if exponent is not None else _SCALE[suffix])
    return value if math.isfinite(value) else None


def worker_name(pod: str, job: str, labels: dict[str, Any]) -> str:
    """``worker 3``, ``ps 1``, ``launcher``: a pod of ``job`` by its role and index (see the module's docstring)."""
    rest = pod[len(job) + 1:] if pod.startswith(job + "-") else pod
    role = labels.get(ROLE_LABEL)
    if not (isinstance(role, str) and _ROLE.fullmatch(role)):
        word = _LEADING_WORD.match(rest)
        role = word[0][:31] if word else "pod"
    index = labels.get(COMPLETION_INDEX)
    if not (isinstance(index, str) and index.isdigit() and len(index) <= 6):
        found = _INDEX.search(rest)
        index = found[1] if found else None
    return role if index is None else f"{role} {int(index)}"


def sample(items: list[Any], job: str) -> dict[str, dict[str, float]]:
    """The PodMetrics ``items`` as workers: each pod's containers summed, pods of the same name summed too."""
    workers: dict[str, dict[str, float]] = {}
    for item in items[:MAX_WORKERS]:
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            continue
        cores = memory = 0.0
        for container in item.get("containers") or []:
            usage = container.get("usage") if isinstance(container, dict) else None
            usage = usage if isinstance(usage, dict) else {}
            cores += quantity(usage.get("cpu")) or 0.0
            memory += quantity(usage.get("memory")) or 0.0
        use = workers.setdefault(worker_name(meta["name"], job, meta.get("labels") or {}),
                                 {"cpu": 0.0, "mem_mib": 0.0, "pods": 0})
        use["cpu"] += 100 * cores
        use["mem_mib"] += memory / 2**20
        use["pods"] += 1
    return {name: {"cpu": round(use["cpu"], 1), "mem_mib": round(use["mem_mib"], 1), "pods": use["pods"]}
            for name, use in sorted(workers.items(), key=lambda item: _order(item[0]))}


def _order(name: str) -> tuple:
    role, _, index = name.partition(" ")
    return (role != "launcher", role, int(index) if index else -1)


def read(api: ApiClient, namespace: str, selector: str, job: str) -> dict[str, dict[str, float]] | None:
    """One list of the job's PodMetrics: its workers' use (see ``sample``), or None when there is none this time
    (no pod measured yet, a transient error). Raises ResourcesUnavailable (no such API, refused)."""
    try:
        listing = api.call_api(
            PODS, "GET", path_params={"namespace": namespace}, query_params=[("labelSelector", selector)],
            response_types_map=OBJECT, auth_settings=["BearerToken"], _return_http_data_only=True,
            header_params={"Accept": "application/json"}, _request_timeout=10)
    except ApiException as exc:
        if exc.status == 404:
            raise ResourcesUnavailable(NO_API) from None
        if exc.status in REFUSED:
            raise ResourcesUnavailable(REFUSED_NOTE.format(status=exc.status)) from None
        return None
    except HTTPError:
        return None
    items = listing.get("items") if isinstance(listing, dict) else None
    return (sample(items, job) or None) if isinstance(items, list) else None
