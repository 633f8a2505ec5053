"""Why a job's pod can no longer run: Kubernetes says so (``DisruptionTarget``), or its node is gone.

A pod with a true ``DisruptionTarget`` condition is being disrupted: node shutdown, preemption by the
scheduler, an API-initiated eviction, its node gone. Kubernetes marks such a pod itself where its controllers run with pod disruption conditions (1.26+):
PodGC gives a pod whose Node object was deleted ``DisruptionTarget`` (``DeletionByPodGC``) and deletes
it, after a 40 s quarantine; the taint eviction controller does the same (``DeletionByTaintManager``)
to a pod on a node the node lifecycle controller tainted ``unreachable``/``not-ready`` once the pod's
toleration of that taint runs out (300 s unless the pod says otherwise). Where they do not (older
clusters, PodGC off, the quarantine not over), the pod stays bound to a node that is deleted or dead,
and only the Node says so. A pod is then lost when its Node no longer exists, when it carries the
``out-of-service`` taint (an admin's word that the node is down), or when a ``NoExecute`` taint of an
unreachable/not-ready node is older than the pod's toleration of it: exactly when the taint eviction
would have evicted it, so a kubelet that is back within its grace does not cost a restart.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

from airflow_ml_provider.jobs.backends.kubernetes.status import said
from airflow_ml_provider.labels import JOB_NAME as JOB_NAME_LABEL
from airflow_ml_provider.labels import PREFIX

_NOT_RUNNING = {"unreachable", "not-ready"}
_DEFAULT_TOLERATION_S = 300  # what the DefaultTolerationSeconds admission plugin gives every pod


def disrupted(pod: dict) -> str | None:
    """Why a pod is being disrupted, from its ``DisruptionTarget`` condition, or None."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return f"pod {pod['metadata']['name']} is disrupted ({said(condition, 'DisruptionTarget')})"
    return None


def job_of(pod: dict) -> str | None:
    """The job a pod belongs to, by its label: the shared pod watch files each pod under it."""
    return (pod["metadata"].get("labels") or {}).get(JOB_NAME_LABEL)


def _fields(obj: dict, part: str, names: tuple[str, ...]) -> dict:
    found = obj.get(part) or {}
    return {name: found[name] for name in names if name in found}


def watched_pod(pod: dict) -> dict | None:
    """What the shared pod watch keeps of a pod that is disrupted or bound to a node (None: nothing): what
    ``disrupted``, ``owned_by`` and ``lost`` read of it."""
    if not (disrupted(pod) or node_name(pod)):
        return None
    return {"metadata": _fields(pod, "metadata", ("name", "labels", "ownerReferences", "creationTimestamp",
                                                  "resourceVersion")),
            "spec": _fields(pod, "spec", ("nodeName", "tolerations")),
            "status": _fields(pod, "status", ("phase", "conditions"))}


def watched_node(node: dict) -> dict:
    """What the shared Node watch keeps of a Node: what ``lost`` reads of it (not its status, which lists
    the node's images and is most of it)."""
    return {"metadata": _fields(node, "metadata", ("name", "resourceVersion")),
            "spec": _fields(node, "spec", ("taints",))}


def owned_by(pod: dict, obj: dict | None) -> bool:
    """Whether the job ``obj`` owns ``pod``, so that a pod of an earlier job of the same name (one the garbage
    collector has not removed yet) does not count. A pod its controller makes directly (MPIJob, Volcano
    Job, batch Job) names the job's uid; one made through objects of its own (a TrainJob's JobSet makes
    Jobs, which make pods) carries the job's own labels (its try and preemption count: each
    resubmission's differ) and was created no earlier than the job."""
    meta = (obj or {}).get("metadata") or {}
    if not meta.get("uid"):
        return False
    refs = pod["metadata"].get("ownerReferences") or []
    if any(ref.get("uid") == meta["uid"] for ref in refs):
        return True
    if any((ref.get("apiVersion"), ref.get("kind")) == (obj.get("apiVersion"), obj.get("kind")) for ref in refs):
        return False  # made directly by another job of that name
    ours = {key: value for key, value in (meta.get("labels") or {}).items() if key.startswith(f"{PREFIX}/")}
    labels = pod["metadata"].get("labels") or {}
    created = pod["metadata"].get("creationTimestamp") or ""  # RFC 3339 in UTC, seconds: ordered as strings
    return (bool(ours) and all(labels.get(key) == value for key, value in ours.items())
            and created >= (meta.get("creationTimestamp") or ""))


def node_name(pod: dict) -> str | None:
    """The node a pod is bound to, while it may still run there (not Succeeded/Failed)."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return None
    return (pod.get("spec") or {}).get("nodeName") or None


def _toleration_s(pod: dict, key: str) -> float | None:
    """How long ``pod`` tolerates a NoExecute taint ``key`` (None: for ever), as the taint eviction reads it."""
    tolerations = (pod.get("spec") or {}).get("tolerations")
    if tolerations is None:
        return _DEFAULT_TOLERATION_S
    matching = [t for t in tolerations if t.get("effect") in (None, "", "NoExecute")
                and (t.get("key") == key or (not t.get("key") and t.get("operator") == "Exists"))]
    if not matching:
        return 0
    if any(t.get("tolerationSeconds") is None for t in matching):
        return None
    return max(0, min(t["tolerationSeconds"] for t in matching))


def _age_s(taint: dict, now: datetime.datetime) -> float:
    added = taint.get("timeAdded")
    if not added:
        return 0.0
    return (now - datetime.datetime.fromisoformat(added.replace("Z", "+00:00"))).total_seconds()


def lost(pod: dict, node: dict | None, now: datetime.datetime) -> str | None:
    """Why ``pod`` can no longer run on its ``node`` (None: the Node object does not exist), or None."""
    name, where = pod["metadata"]["name"], node_name(pod)
    if where is None:
        return None
    if node is None:
        return f"pod {name} lost its node {where} (the Node was deleted)"
    for taint in (node.get("spec") or {}).get("taints") or []:
        key = taint.get("key") or ""
        prefix, _, condition = key.partition("/")
        if prefix != "node.kubernetes.io" or taint.get("effect") != "NoExecute":
            continue
        if condition == "out-of-service":
            return f"pod {name} lost its node {where} (out of service)"
        if condition in _NOT_RUNNING:
            tolerated = _toleration_s(pod, key)
            if tolerated is not None and _age_s(taint, now) >= tolerated:
                return f"pod {name} lost its node {where} ({condition} for {_age_s(taint, now):.0f} s)"
    return None


def first_lost(pods: list[dict], node: Callable[[str], dict | None],
               now: datetime.datetime | None = None) -> str | None:
    """Why the first of ``pods`` whose node is lost is lost, reading each distinct node once through
    ``node`` (its Node; None when it does not exist)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    nodes: dict[str, dict | None] = {}
    for pod in pods:
        if (where := node_name(pod)) is None:
            continue
        if where not in nodes:
            nodes[where] = node(where)
        if reason := lost(pod, nodes[where], now):
            return reason
    return None
