"""DAG parse time of a 4,096-trial recipe DAG and of the shipped DAGs, and what parsing imports.

Each DAG file is parsed in a fresh interpreter that has already imported ``airflow.sdk`` (as the DAG
processor has): "first parse" includes importing this provider's modules, "warm parse" is the
median of 5 more parses with them loaded (what building the DAG costs). Also listed: the top-level
packages the first parse imports, flagging heavy ones (training frameworks, MLflow, plotting,
cluster clients). Target: < 200 ms per parse, no heavy import.

    AIRFLOW_HOME=/tmp/bench-home .venv/bin/python benchmarks/dag_parse.py [--trials 4096]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_MS = 200
HEAVY = {
    "tensorflow",
    "keras",
    "horovod",
    "lightgbm",
    "mlflow",
    "matplotlib",
    "sklearn",
    "pandas",
    "torch",
    "kubernetes",
    "kubernetes_asyncio",
    "elasticsearch",
    "optuna",
}
_PROBE = textwrap.dedent("""
    import json, runpy, statistics, sys, time
    import airflow.sdk
    from airflow.sdk import DAG, BaseOperator  # the DAG processor has these loaded before parsing
    before = set(sys.modules)
    start = time.perf_counter()
    runpy.run_path(sys.argv[1])
    first = time.perf_counter() - start
    imported = sorted(set(sys.modules) - before)
    warm = []
    for _ in range(5):
        start = time.perf_counter()
        runpy.run_path(sys.argv[1])
        warm.append(time.perf_counter() - start)
    print(json.dumps({"first": first, "warm": statistics.median(warm), "imported": imported}))
""")
_RECIPE = """\
version: 1
name: bench_recipe_{trials}
experiments:
  prepare:
    framework: generic
    command: [python, prepare.py]
  train:
    depends_on: [prepare]
    framework: horovod
    workers: 2
    samples: {trials}
    hardware: {{cpu: 4, memory: 8Gi, gpu: {{type: nvidia-tesla-v100, count: 1}}}}
    parameters:
      learning_rate: {{min: 0.0001, max: 0.1, scale: log}}
      dropout: {{min: 0.0, max: 0.5}}
      batch_size: [16, 32, 64, 128]
      optimizer: [sgd, adam, rmsprop]
    command: [python, train.py, --lr, "{{{{learning_rate}}}}", --dropout, "{{{{dropout}}}}",
              --batch-size, "{{{{batch_size}}}}", --optimizer, "{{{{optimizer}}}}", --seed, "{{{{sample}}}}"]
"""


def parse(path: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE, str(path)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"parsing {path} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4096)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dag-parse-") as tmp:
        recipe = Path(tmp) / "recipe.yaml"
        recipe.write_text(_RECIPE.format(trials=args.trials))
        recipe_dag = Path(tmp) / "recipe_dag.py"
        recipe_dag.write_text(
            f"from airflow_ml_provider.recipes import dag_from_recipe\n"
            f"dag = dag_from_recipe({str(recipe)!r})\n"
        )
        targets = {f"recipe DAG, {args.trials} trials": recipe_dag}
        targets.update({f"dags/{p.name}": p for p in sorted((REPO / "dags").glob("*.py"))})
        results = {name: parse(path) for name, path in targets.items()}

    print(f"{'DAG file':<34} {'first parse':>12} {'warm parse':>11}  target < {TARGET_MS} ms (warm)")
    for name, result in results.items():
        first, warm = result["first"] * 1000, result["warm"] * 1000
        print(f"{name:<34} {first:>9.0f} ms {warm:>8.0f} ms  {'yes' if warm < TARGET_MS else 'NO'}")
    print("\nTop-level packages imported by the first parse (beyond airflow.sdk):")
    for name, result in results.items():
        packages = sorted({module.split(".")[0] for module in result["imported"]})
        heavy = [p for p in packages if p in HEAVY]
        print(f"  {name}: {len(result['imported'])} modules; heavy: {', '.join(heavy) or 'none'}")
        print(f"    {', '.join(packages)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
