"""Chaos helpers for the elastic and preemption tests: read a local job's events, find and kill a rank."""

from __future__ import annotations

import json
from pathlib import Path

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend


def events(job_dir: Path, kind: str | None = None) -> list[dict]:
    """Every structured line of a local job's log (of one kind), in order, with its source as ``_source``."""
    found = []
    log = job_dir / "output.log"
    for line in (log.read_text().splitlines() if log.exists() else []):
        source, _, text = line.partition("] ")
        if text.startswith("{"):
            event = json.loads(text)
            if kind is None or event.get("event") == kind:
                found.append({**event, "_source": source.lstrip("[")})
    return found


def last_step(job_dir: Path, kind: str = "metrics", field: str = "step") -> int:
    steps = [event[field] for event in events(job_dir, kind) if field in event]
    return max(steps, default=0)


def job_dirs(backend: LocalBackend, prefix: str) -> list[Path]:
    return sorted((backend.root / "jobs").glob(f"{prefix}*")) if (backend.root / "jobs").is_dir() else []
