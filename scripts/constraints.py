"""The published constraints file of this release, ``constraints/constraints-<version>.txt``: every version of
the tested control environment (requirements/control.lock: Airflow, its providers, MLflow, the drivers), one
``name==version`` a line, for ``pip install -c`` / ``uv pip install -c`` beside the wheel and its extras
(docs/deploying.md). A constraint only pins what is installed: the test-only packages of the lock (pytest,
moto) install nothing by being named here.

``python scripts/constraints.py`` writes it; ``--check`` exits 1, naming the file, while it differs from what
the lock gives (tests/unit/test_constraints.py runs the same comparison)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements" / "control.lock"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(\S+)")


def version() -> str:
    text = (REPO / "airflow_ml_provider" / "__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE).group(1)


def path() -> Path:
    return REPO / "constraints" / f"constraints-{version()}.txt"


def render(lock: str) -> str:
    """The constraints the lock's text gives (its pins, extras dropped, sorted by name)."""
    python = re.search(r"--python-version (\S+)", lock)
    pins = {}
    for line in lock.splitlines():
        if match := _PIN.match(line):
            pins[re.sub(r"[-_.]+", "-", match[1]).lower()] = match[3]
    header = [
        f"# Constraints of airflow-ml-provider {version()}: the versions it was tested with (Python "
        f"{python[1] if python else '3'}),",
        "# generated from requirements/control.lock by scripts/constraints.py; do not edit. Use:",
        f'#   pip install "airflow-ml-provider[pipeline,lightgbm,postgres]=={version()}" -c constraints-{version()}.txt',
    ]
    return "\n".join(header + [f"{name}=={pin}" for name, pin in sorted(pins.items())]) + "\n"


def main(argv: list[str]) -> int:
    wanted, target = render(LOCK.read_text()), path()
    if "--check" in argv:
        if not target.exists() or target.read_text() != wanted:
            print(f"{target.relative_to(REPO)} differs from requirements/control.lock: run python scripts/constraints.py",
                  file=sys.stderr)
            return 1
        return 0
    target.parent.mkdir(exist_ok=True)
    stale = [p for p in target.parent.glob("constraints-*.txt") if p != target]
    target.write_text(wanted)
    print(f"wrote {target.relative_to(REPO)}" + (f" (older: {', '.join(p.name for p in stale)})" if stale else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
