"""A sharded job (``jobs.shards``) as one batch/v1 Indexed Job: N completions, M pods at once, one shard per pod.

Pod ``i`` (completion index ``i``) runs shard ``i`` through ``runtime.shard_pod``, which skips a committed shard,
runs the job's command with the worker's contract and commits it as ``runtime.shards`` does. The shards' inputs
reach the pods in a ConfigMap of the job's name (one JSON list a line, mounted read-only; each pod reads its own
line), so the Job stays small whatever N; the API server bounds a ConfigMap's data to 1 MiB (kubernetes
pkg/apis/core/validation/validation.go ``ValidateConfigMap``: its values' lengths summed, at most
``core.MaxSecretSize``, 1 MiB; tests/integration/kubernetes/test_sharded_indexed_job.py finds the bound where the
server puts it), and a larger plan is refused naming ``shards.inputs``.

The server must run Indexed Jobs (``completionMode``: beta and on by default from 1.22, GA in 1.24); an older one
drops the field, and its pods would get no completion index, so a sharded job is refused there.

Retries (read at kubernetes/kubernetes 6ae037f1db84 pkg/controller/job/job_controller.go and 78fc8e44052f
indexed_job_utils.go, as tests/job_controller.py plays them):

- a server of 1.29 or later (``backoffLimitPerIndex`` beta, on by default) gets ``backoffLimitPerIndex`` =
  ``max_attempts`` - 1 and ``maxFailedIndexes`` = ``max_failed_shards``: a failed pod's index gets a new pod with the
  failure count annotated (job_controller.go:1681-1683, indexed_job_utils.go:349-376), until the count reaches the
  limit and the index fails (indexed_job_utils.go:98-112), a disrupted pod not counted (``SPARE_DISRUPTED``); more
  failed indexes than ``maxFailedIndexes`` fail the Job (``MaxFailedIndexesExceeded``, job_controller.go:876-877),
  and once every index succeeded or failed with some failed the Job ends Failed with reason ``FailedIndexes``
  (:878-879): within ``max_failed_shards``, which is this provider's success (``shard_state``);
- an older server (it drops those fields) gets the pod-side retry: the pod tries its shard up to ``max_attempts``
  times, then records the failure under the output and exits 0; ``backoffLimit`` counts lost pods only (a pod that
  dies is replaced for its index; ``kubernetes.backoff_limit``, at least ``max_attempts`` per pod that runs at
  once), and a pod that finds more than ``max_failed_shards`` failed shards of its Job exits 1 at once, so the Job
  then fails by ``backoffLimit``.

A lost pod (disrupted, its node gone) is the Job controller's to replace: the job is not PREEMPTED for it
(``IndexedJobBackend.replaces_lost_pods``), so a spot node's loss re-runs only the shards it had.

The job's result (``result``) is a ``ShardQueue.result()`` (``jobs.shards.settled``) of what is committed and
recorded under ``shards.output`` and of the Job's ``status.failedIndexes``.
"""

from __future__ import annotations

import json

from airflow_ml_provider.jobs.backends.kubernetes.status import said
from airflow_ml_provider.jobs.shards import ShardPlan, settled
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState, JobStatus
from airflow_ml_provider.labels import PREFIX

PLAN_DIR = "/var/run/airflow-ml/shards"  # the plan's ConfigMap, mounted read-only in every pod
PLAN_KEY = "inputs.jsonl"
PLAN_VOLUME = "shard-plan"
CONFIGMAP_MAX_BYTES = 1024 * 1024  # core.MaxSecretSize, the API server's bound on a ConfigMap's data
PLAN_ANNOTATION = f"{PREFIX}/shards"  # the plan less its inputs, on the Job: what its result is read from
SHARDED_LABEL = f"{PREFIX}/sharded"  # on the Job (labels are what the shared watch keeps): its lost pods are replaced
FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"  # the Job controller's, on a per-index pod
# The Job's uid on its pods, which each marker records (ran by this Job, or committed before it): the label the API
# server puts in a Job's template since 1.27, and the one before it (which it still sets beside it).
UID_LABELS = {True: "batch.kubernetes.io/controller-uid", False: "controller-uid"}
PER_INDEX_SINCE = (1, 29)
INDEXED_SINCE = (1, 22)
ENTRY = ["python", "-m", "airflow_ml_provider.runtime.shard_pod"]
# A pod taken away (DisruptionTarget: preemption, eviction, a node shut down or gone) spends no try of its shard, as
# on the local backend: the failure the policy ignores is not counted for the index (isIndexFailed,
# indexed_job_utils.go:98-112) and its replacement keeps the index's failure count (getNewIndexFailureCounts :359-376)
SPARE_DISRUPTED = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}


def server_version(version: dict) -> tuple[int, int] | None:
    """(major, minor) of a server's ``/version`` (``{"major": "1", "minor": "29+"}``), or None if it says none."""
    try:
        return int(str(version.get("major", "")).rstrip("+")), int(str(version.get("minor", "")).rstrip("+"))
    except ValueError:
        return None


def per_index_supported(version: dict) -> bool:
    """Whether a server's ``/version`` runs ``backoffLimitPerIndex`` (1.29 or later)."""
    return (server_version(version) or (0, 0)) >= PER_INDEX_SINCE


def check_indexed(version: dict) -> None:
    """ValueError naming ``shards`` when the server predates Indexed Jobs (it would drop ``completionMode``)."""
    known = server_version(version)
    if known is not None and known < INDEXED_SINCE:
        raise ValueError(f"shards: the cluster's Kubernetes {version.get('gitVersion') or '.'.join(map(str, known))} "
                         "has no Indexed Jobs (completionMode, 1.22 and later), which the indexed-job backend runs a "
                         "sharded job as; use the local backend, or a newer cluster")


def plan_config_map(name: str, namespace: str, labels: dict[str, str], plan: ShardPlan) -> dict | None:
    """The ConfigMap of the shards' inputs (None when they have none); ValueError naming ``shards.inputs`` when it
    would pass the API server's 1 MiB."""
    if not plan.inputs:
        return None
    data = "".join(json.dumps(inputs, separators=(",", ":")) + "\n" for inputs in plan.inputs)
    size = len(data.encode())
    if size > CONFIGMAP_MAX_BYTES:
        raise ValueError(f"shards.inputs: {size:,} bytes as the indexed-job backend's plan ConfigMap, more than the "
                         f"{CONFIGMAP_MAX_BYTES:,} a ConfigMap holds; group files into fewer shards, or list them "
                         "under a prefix each shard reads")
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace,
                                                                  "labels": dict(labels)}, "data": {PLAN_KEY: data}}


def command(spec: TrainingJobSpec, per_index: bool) -> list[str]:
    """The pods' command: ``runtime.shard_pod`` around the job's."""
    plan = spec.shards
    return [*ENTRY, "--output", plan.output, "--count", str(plan.count), "--max-attempts", str(plan.max_attempts),
            "--max-failed", str(plan.max_failed_shards), *(["--per-index"] if per_index else []),
            *(["--inputs", f"{PLAN_DIR}/{PLAN_KEY}"] if plan.inputs else []),
            *(["--in-process"] if plan.in_process else []), "--", *spec.command]


def downward_env(per_index: bool) -> list[dict]:
    """What a pod learns from its own object: its Job's uid, and on a per-index server its index's failures."""
    env = [{"name": "AIRFLOW_ML_JOB_UID", "valueFrom": {"fieldRef": {
        "fieldPath": f"metadata.labels['{UID_LABELS[per_index]}']"}}}]
    if per_index:
        env.append({"name": "AIRFLOW_ML_INDEX_FAILURES", "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{FAILURE_COUNT}']"}}})
    return env


def mount_plan(template: dict, config_map: str) -> None:
    """The plan's ConfigMap as a read-only volume of the pod template, at PLAN_DIR in its container."""
    pod = template["spec"]
    pod.setdefault("volumes", []).append({"name": PLAN_VOLUME, "configMap": {"name": config_map}})
    for container in pod["containers"]:
        container.setdefault("volumeMounts", []).append({"name": PLAN_VOLUME, "mountPath": PLAN_DIR, "readOnly": True})


def job_fields(spec: TrainingJobSpec, per_index: bool) -> dict:
    """The Job spec's fields of a sharded job: its completions, parallelism and retries (see the module's note)."""
    plan = spec.shards
    parallelism = min(spec.num_workers, plan.count)
    fields = {"completionMode": "Indexed", "completions": plan.count, "parallelism": parallelism}
    if per_index:  # (backoffLimit left out: with backoffLimitPerIndex the API server defaults it to MaxInt32)
        fields.update(backoffLimitPerIndex=plan.max_attempts - 1, maxFailedIndexes=plan.max_failed_shards,
                      podFailurePolicy=SPARE_DISRUPTED)
    else:
        fields["backoffLimit"] = max(spec.kubernetes.backoff_limit, parallelism * plan.max_attempts)
    return fields


def annotation(plan: ShardPlan) -> dict[str, str]:
    return {PLAN_ANNOTATION: json.dumps({"count": plan.count, "output": plan.output, "max_attempts": plan.max_attempts,
                                         "max_failed_shards": plan.max_failed_shards}, sort_keys=True)}


def shard_state(condition: dict, status: dict, is_sharded: bool = True) -> JobStatus | None:
    """A sharded Job's end as the provider says it: ``FailedIndexes`` (every index settled, some failed, no more than
    ``maxFailedIndexes``: job_controller.go:876-879) is its success; ``MaxFailedIndexesExceeded`` and, without
    per-index retries, ``BackoffLimitExceeded`` are failures told in its terms. None for any other condition."""
    if condition.get("type") not in ("Failed", "FailureTarget"):
        return None
    if is_sharded and condition.get("reason") == "BackoffLimitExceeded":
        return JobStatus(JobState.FAILED, f"{said(condition)}: more than max_failed_shards shards failed every try, or "
                                          "its pods were lost more than backoffLimit times; the failed shards' records "
                                          "are under shards.output/.failed")
    failed = str(status.get("failedIndexes") or "?")[:200]
    if condition.get("reason") == "FailedIndexes":
        return JobStatus(JobState.SUCCEEDED, f"shards {failed} failed, within max_failed_shards (the Job's "
                                             "maxFailedIndexes)")
    if condition.get("reason") == "MaxFailedIndexesExceeded":
        return JobStatus(JobState.FAILED, f"shards {failed} failed max_attempts times each: more than "
                                          "max_failed_shards (the Job's maxFailedIndexes); their failure records are "
                                          "under shards.output/.failed")
    return None


def progress(job: dict) -> tuple[int, int] | None:
    """(settled, count) of a sharded Job: its succeeded pods (one a shard; a shard out of tries without per-index
    retries exits 0 too, its failure recorded) and its failed indexes; None for a Job not sharded."""
    if (job.get("metadata", {}).get("labels") or {}).get(SHARDED_LABEL) != "true":
        return None
    spec, status = job.get("spec") or {}, job.get("status") or {}
    count = spec.get("completions")
    if not isinstance(count, int) or count < 1:
        return None
    succeeded = status.get("succeeded") if isinstance(status.get("succeeded"), int) else 0
    return min(succeeded + len(indexes(status.get("failedIndexes"), count)), count), count


def indexes(text: str | None, count: int) -> set[int]:
    """The Job controller's interval list (``1,3-5``: indexed_job_utils.go parseIndexesFromString) as a set."""
    found: set[int] = set()
    for part in (text or "").split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            found.update(range(int(first), min(int(last or first), count - 1) + 1))
    return found


def result(job: dict, committed: dict[int, dict] | None, failed: dict[int, dict]) -> dict:
    """The job's result (``ShardQueue.result``'s shape) from its Job (uid, plan annotation, ``status.failedIndexes``)
    and the records under its output (``runtime.shards.records``): failed are the shards the Job says failed and
    those whose failure record is this Job's. ``committed`` None: the output could not be read, and the Job's
    ``completedIndexes`` count as shards it ran (its rows, and which were skipped, unknown)."""
    meta, status = job.get("metadata") or {}, job.get("status") or {}
    plan = json.loads((meta.get("annotations") or {}).get(PLAN_ANNOTATION) or "{}")
    count, uid = int(plan.get("count", 0)), meta.get("uid")
    out = indexes(status.get("failedIndexes"), count)
    out |= {index for index, record in failed.items() if uid is not None and record.get("job") == uid}
    if committed is None:
        committed = {index: {"job": uid} for index in indexes(status.get("completedIndexes"), count) - out}
    return settled(count, int(plan.get("max_attempts", 3)), int(plan.get("max_failed_shards", 0)), job=uid,
                   committed=committed, failed=out).result()
