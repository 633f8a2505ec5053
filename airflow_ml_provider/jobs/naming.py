"""Deterministic job names and labels, so a restarted task finds the job it already submitted."""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass

from airflow_ml_provider import labels

_NAME_BUDGET = 40  # leaves room for pod suffixes such as "-launcher-xxxxx" within DNS-1123's 63
DIGEST_CHARS = 13  # base32: 65 bits, so two valid identities never share a name by chance (birthday bound 2**32)
_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_NOT_LABEL = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class JobIdentity:
    """The task instance a job belongs to. The try number is a label, not part of the name:
    every try of one task instance addresses the same job. ``trial`` numbers the jobs of one search
    task; it is its own part of the digested key, so trial 1 of task ``tune`` never shares a name with
    a task whose id is ``tune.trial-1``."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1
    try_number: int = 1
    trial: int | None = None

    @property
    def name(self) -> str:
        parts = (self.dag_id, self.task_id, self.run_id, str(self.map_index))
        if self.trial is not None:
            parts += ("trial", str(self.trial))
        digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
        digest = base64.b32encode(digest).decode().lower()[:DIGEST_CHARS]
        task = self.task_id if self.trial is None else f"{self.task_id}-trial-{self.trial}"
        readable = _NOT_DNS.sub("-", task.lower()).strip("-") or "job"
        readable = readable[: _NAME_BUDGET - DIGEST_CHARS - 5].rstrip("-")
        return f"aml-{readable}-{digest}"

    def labels(self) -> dict[str, str]:
        """Kubernetes-safe labels (63 characters, restricted alphabet); the name's hash disambiguates."""
        return {
            labels.JOB_NAME: self.name,
            labels.DAG_ID: _label_value(self.dag_id),
            labels.TASK_ID: _label_value(self.task_id),
            labels.RUN_ID: _label_value(self.run_id),
            labels.MAP_INDEX: str(self.map_index) if self.map_index >= 0 else "unmapped",
            labels.TRY_NUMBER: str(self.try_number),
        }

    @classmethod
    def from_context(cls, context) -> JobIdentity:
        ti = context["ti"]
        return cls(
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            map_index=ti.map_index if ti.map_index is not None else -1,
            try_number=ti.try_number,
        )


def _label_value(value: str) -> str:
    cleaned = _NOT_LABEL.sub("_", value)[:63]
    return cleaned.strip("._-") or "none"
