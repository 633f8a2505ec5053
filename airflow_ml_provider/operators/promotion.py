"""Champion promotion as a compare-and-set: the gate compared the model with one champion, and ``champion``
moves only while that version still holds it. When another run promoted its model in between, the gate's
comparison runs again against the new champion (``gate.compare_again``); a model that does not beat it, or
cannot be compared with it, is superseded: it stays challenger and the task log and XCom say why."""

from __future__ import annotations

from typing import Any

from airflow_ml_provider.hooks.model_registry import ModelRegistryHook
from airflow_ml_provider.operators.gate import compare_again

MAX_TRIES = 5  # compare-and-sets before giving up on a champion that keeps changing


def promote(registry: ModelRegistryHook, name: str, version: int, gate: dict[str, Any],
            evaluation: dict[str, Any], log: Any) -> dict[str, Any]:
    """Move ``champion`` of ``name`` to ``version`` if it still beats the champion. Returns ``{"promoted",
    "previous_champion", "superseded"`` (None, or why not), ``"gate_again"`` (the comparisons run again)}."""
    expected, again = gate.get("champion_version"), []
    for _ in range(MAX_TRIES):
        done = registry.promote(name, version, expected)
        if done.moved:
            log.info("Model %s version %d is the champion (was: %s), moved under %s", name, version,
                     done.previous, done.lock)
            return {"promoted": True, "previous_champion": done.previous, "superseded": None, "gate_again": again}
        decision = compare_again(gate, evaluation, done.champion)
        again.append(decision)
        log.info("Version %d of %s became the champion after the gate compared with %s; the gate's comparison "
                 "again:\n  %s", done.previous, name, _named(expected), "\n  ".join(decision["reasons"]))
        if not decision["passed"]:
            why = (f"superseded: version {done.previous} became the champion after the gate compared with "
                   f"{_named(expected)}, and {'; '.join(decision['reasons'])}")
            return {"promoted": False, "previous_champion": None, "superseded": why, "gate_again": again}
        expected = done.previous
    why = f"superseded: the champion changed {MAX_TRIES} times while this version was being promoted"
    return {"promoted": False, "previous_champion": None, "superseded": why, "gate_again": again}


def _named(version: int | None) -> str:
    return f"version {version}" if version is not None else "no champion"
