"""Shapes of the code that a reviewer should not have to look for: no object resets another's cached state,
no class calls into another's private methods, and the job runner's methods call each other without a cycle
(a resubmission is one more turn of a loop, never a deeper call)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_ml_provider"
TREES = {path: ast.parse(path.read_text()) for path in sorted(PACKAGE.rglob("*.py"))}


def _private_methods() -> set[str]:
    """Every ``_name`` a class of the package defines (dunders aside)."""
    return {item.name for tree in TREES.values() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
            for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            and item.name.startswith("_") and not item.name.startswith("__")}


def test_nothing_resets_a_cached_property_from_outside_or_calls_a_private_method_of_another_object():
    private = _private_methods()
    found = []
    for path, tree in TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("pop", "clear") and \
                    isinstance(node.value, ast.Attribute) and node.value.attr == "__dict__":  # a cache emptied
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
            if isinstance(node, ast.Attribute) and node.attr in private:
                base = node.value
                ours = (isinstance(base, ast.Name) and base.id in ("self", "cls")) or (
                    isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id in ("super", "type"))
                if not ours:
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []


def test_the_job_runner_resubmits_in_a_loop_not_by_recursion():
    [runner] = [node for node in ast.walk(TREES[PACKAGE / "operators" / "job_runner.py"])
                if isinstance(node, ast.ClassDef) and node.name == "JobRunner"]
    calls = {method.name: {call.func.attr for call in ast.walk(method) if isinstance(call, ast.Call)
                           and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
                           and call.func.value.id == "self"}
             for method in runner.body if isinstance(method, ast.FunctionDef)}

    def reaches(start: str, target: str, seen: frozenset = frozenset()) -> bool:
        return any(callee == target or (callee in calls and callee not in seen
                                        and reaches(callee, target, seen | {callee}))
                   for callee in calls.get(start, ()))

    assert [name for name in calls if reaches(name, name)] == []
    assert "_resubmit" in calls["_drive"] and "_wait" in calls["_drive"], "the loop that drives resubmissions"
