"""The package's import graph, read from its source: no import circle, and no import from a lower layer to a
higher one (DESIGN: imports point downward only). Lazy imports inside functions count: they are still
dependencies, only deferred."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_ml_provider"

# Lowest first. A module's layer is its sub-package's, or its own for a top-level module.
LAYERS = [
    {"labels", "patterns", "artifact_layout", "observability", "runtime", "xcom_keys"},  # worker code and plain values
    {"logs"},  # reading a job's log lines: sources, rules, metrics
    {"jobs"},  # the Airflow-free core: specs, backends, following a job
    {"search", "serving"},  # the search core, serving manifests (Airflow-free)
    {"assets", "hooks", "reporting"},  # connections and clients; what a run reports (summary, lineage, MLflow output)
    {"plugins"},  # the API server's views and refusal middleware (they read what the follow core saved, as data)
    {"triggers"},
    {"operators", "sensors"},
    {"recipes"},  # YAML recipe -> DAG
    {"ci", "cli", "get_provider_info"},  # ci: `airflow-ml check`, which loads DAGs and recipes
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``path`` imports, at module level or inside a function."""
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            targets.update(name if name in modules else node.module for name in names)
        elif isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
    return {target for target in targets if target in modules}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYER.get(parts[1]) if len(parts) > 1 else None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_has_a_layer() -> None:
    assert [module for module in _graph() if "." in module and _layer(module) is None] == []


def test_no_import_circle() -> None:
    assert _cycles(_graph()) == []


def test_imports_point_downward_only() -> None:
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in _graph().items()
        for target in targets
        if (_layer(module) is not None and _layer(target) is not None and _layer(target) > _layer(module))
    )
    assert upward == []


def test_the_checks_catch_what_they_claim() -> None:
    """Each check fails on a graph built to break it, so a green run means something."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert _layer("airflow_ml_provider.logs.ecs") < _layer("airflow_ml_provider.jobs.naming")
