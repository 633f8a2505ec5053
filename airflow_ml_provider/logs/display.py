"""How a job's lines read in a task log: the runtime's JSON events as one compact line each."""

from __future__ import annotations

from typing import Any

from airflow_ml_provider.logs.metrics import parse_event
from airflow_ml_provider.logs.source import LogLine

_POSITION = ("epoch", "step")
_HIDDEN = ("event", "rank")


def format_line(line: LogLine) -> str:
    """``[rank 0] step 30  auc=0.9690  loss=0.3325`` for a metrics event, ``[launcher] resources  rank 0 cpu
    98% 412 MiB ...`` for a resources sample, ``[rank 0] checkpoint epoch 3 step 30  path=...`` for
    other events; any other line unchanged. The job's own log (files,
    Elasticsearch) keeps the full JSON for the parsers."""
    event = parse_event(line.text)
    if event is None:
        return str(line)
    kind = event["event"]
    if kind == "resources" and isinstance(event.get("workers"), dict):
        return f"[{line.source}] resources  " + "  ".join(_use(rank, use) for rank, use in event["workers"].items())
    head = [] if kind == "metrics" else [kind]
    head += [f"{key} {event[key]}" for key in _POSITION if key in event]
    values = [f"{key}={_value(value)}" for key, value in sorted(event.items())
              if key not in _HIDDEN and key not in _POSITION]
    return f"[{line.source}] " + "  ".join([" ".join(head), *values] if head else values)


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if 1e-3 <= abs(value) < 1e4 else f"{value:.4g}"
    return str(value)


def _use(rank: str, use: Any) -> str:
    """``rank 0 cpu 98% 412 MiB`` of a resources sample (jobs.backends.local.resources)."""
    who = rank if rank == "launcher" else f"rank {rank}"
    cpu, mem = (use.get(key) if isinstance(use, dict) else None for key in ("cpu", "mem_mib"))
    if not all(isinstance(value, int | float) and not isinstance(value, bool) for value in (cpu, mem)):
        return f"{who} {use}"
    return f"{who} cpu {cpu:.0f}% {mem:.0f} MiB"
