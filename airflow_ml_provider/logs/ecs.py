"""The layout of log documents in Elasticsearch: ECS as Filebeat's Kubernetes autodiscovery writes it.

One place names the fields, so the reader (logs.elasticsearch), the local shipper
(tools/filebeat_shipper.py) and the index mapping agree; a cluster whose documents differ overrides
names through ``EcsFields``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from typing import Any

from airflow_ml_provider.labels import JOB_NAME

# The namespace of the local backend's jobs' documents: no Kubernetes namespace of their own, so the
# shipper (tools/filebeat_shipper.py; a Filebeat ``fields`` setting on a real host) stamps this one, and
# their reader keeps to it as a Kubernetes job's reader keeps to its namespace.
LOCAL_NAMESPACE = "local"


def dedot(label: str) -> str:
    """A Kubernetes label key as Filebeat stores it (``labels.dedot: true``, its default)."""
    return label.replace(".", "_")


@dataclass(frozen=True)
class EcsFields:
    """Where each piece of a log line lives in a document (dotted paths).

    ``timestamp``, ``offset`` and ``tiebreaker`` order the lines: Filebeat's ``log.file.path`` names one
    container's log file, so (file, byte offset) places a line within it. Documents are told apart by
    their ``_index`` and ``_id`` (Elasticsearch 8 refuses to sort on ``_id``, so it orders nothing).
    """

    timestamp: str = "@timestamp"
    message: str = "message"
    source: str = "kubernetes.pod.name"
    namespace: str = "kubernetes.namespace"
    job: str = f"kubernetes.labels.{dedot(JOB_NAME)}"
    offset: str = "log.offset"
    tiebreaker: str = "log.file.path"

    @classmethod
    def from_dict(cls, overrides: dict[str, str] | None) -> EcsFields:
        """Defaults with ``overrides`` applied; an unknown name is an error naming it."""
        overrides = overrides or {}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"fields: unknown field name(s) {unknown}; known: {sorted(known)}")
        bad = {k: v for k, v in overrides.items() if not isinstance(v, str) or not v}
        if bad:
            raise ValueError(f"fields: each field path must be a non-empty string, got {bad}")
        return cls(**overrides)

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def mappings(names: EcsFields = EcsFields()) -> dict[str, Any]:
    """An index mapping with the types the reader relies on (what Filebeat's template declares):
    keywords for exact filters (every label too) and the tiebreaker, a date and a long to sort on."""
    types = {names.timestamp: "date", names.offset: "long", names.message: "text", names.source: "keyword",
             names.namespace: "keyword", names.job: "keyword", names.tiebreaker: "keyword",
             "host.name": "keyword"}
    properties: dict[str, Any] = {}
    for path, kind in types.items():
        *parents, leaf = path.split(".")
        node = properties
        for parent in parents:
            node = node.setdefault(parent, {"properties": {}})["properties"]
        node[leaf] = {"type": kind}
    labels = {"kubernetes_labels": {"path_match": "kubernetes.labels.*", "mapping": {"type": "keyword"}}}
    return {"dynamic_templates": [labels], "properties": properties}


def document(*, timestamp: datetime, message: str, pod: str, namespace: str, labels: dict[str, str],
             file_path: str, offset: int, host: str, container: str = "worker") -> dict[str, Any]:
    """One log line as a Filebeat ``container`` input document (nested objects, dedotted labels)."""
    utc = timestamp.astimezone(timezone.utc)
    return {
        "@timestamp": utc.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "message": message,
        "stream": "stdout",
        "log": {"offset": offset, "file": {"path": file_path}},
        "input": {"type": "container"},
        "host": {"name": host},
        "ecs": {"version": "8.0.0"},
        "kubernetes": {
            "namespace": namespace,
            "pod": {"name": pod},
            "container": {"name": container},
            "labels": {dedot(key): value for key, value in labels.items()},
        },
    }


def getter(path: str) -> Callable[[dict[str, Any]], Any]:
    """``field(doc, path)`` with the path split once: for reading the same field of many documents
    (the plain nested layout is tried first, without a loop over alternatives)."""
    parts = path.split(".")
    if len(parts) == 1:
        def get(doc: dict[str, Any]) -> Any:
            try:
                return doc[path]
            except (KeyError, TypeError, IndexError):
                return field(doc, path)
    elif len(parts) == 3:  # kubernetes.pod.name: no loop for the common depth (read once per line)
        first, second, third = parts

        def get(doc: dict[str, Any]) -> Any:
            try:
                return doc[first][second][third]
            except (KeyError, TypeError, IndexError):
                return field(doc, path)
    else:
        def get(doc: dict[str, Any]) -> Any:
            node: Any = doc
            try:
                for part in parts:
                    node = node[part]
            except (KeyError, TypeError, IndexError):
                return field(doc, path)
            return node
    return get


def column(path: str) -> Callable[[list[dict[str, Any]]], list[Any]]:
    """``[field(doc, path) for doc in docs]`` with the path split once, in one comprehension where every
    document nests the path plainly (a page of documents as Filebeat writes them), else doc by doc."""
    get, parts = getter(path), path.split(".")
    if len(parts) == 1:
        def values(docs: list[dict[str, Any]]) -> list[Any]:
            try:
                return [doc[path] for doc in docs]
            except (KeyError, TypeError, IndexError):
                return list(map(get, docs))
    elif len(parts) == 3:
        first, second, third = parts

        def values(docs: list[dict[str, Any]]) -> list[Any]:
            try:
                return [doc[first][second][third] for doc in docs]
            except (KeyError, TypeError, IndexError):
                return list(map(get, docs))
    else:
        def values(docs: list[dict[str, Any]]) -> list[Any]:
            return list(map(get, docs))
    return values


def field(doc: dict[str, Any], path: str) -> Any:
    """The value at a dotted path, whether the document nests objects or stores dotted keys."""
    node: Any = doc
    for part in path.split("."):  # the common layout first: plain nested objects
        if not isinstance(node, dict) or part not in node:
            break
        node = node[part]
    else:
        return node
    if path in doc:
        return doc[path]
    head, dot, rest = path.partition(".")
    while dot:
        child = doc.get(head)
        if isinstance(child, dict):
            value = field(child, rest)
            if value is not None:
                return value
        step, dot, rest = rest.partition(".")
        head = f"{head}.{step}"
    return None
