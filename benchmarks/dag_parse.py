"""DAG parse time of a 4,096-trial recipe DAG and of every shipped DAG, and what parsing imports.

Each DAG file is parsed in fresh interpreters that have already imported ``airflow.sdk`` (as the DAG
processor has): "first parse" includes importing this provider's modules (the best of 3 fresh
processes), "warm parse" is the median of 5 more parses in one of them (what building the DAG costs).
Both are shown as CPU time (what the DAG processor spends, and what stays meaningful on a shared
machine) and as wall time. Also listed: the top-level packages the first parse imports, flagging heavy
ones (training frameworks, MLflow, Optuna, numpy, cluster and cloud clients).

Asserts (exit status 1, naming what missed): first parse <= 300 ms CPU for every DAG file, warm parse
< 100 ms CPU, no heavy import at parse time.

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
FIRST_MS, WARM_MS = 300, 100
HEAVY = {
    "tensorflow", "keras", "horovod", "lightgbm", "mlflow", "matplotlib", "sklearn", "pandas", "numpy", "torch",
    "optuna", "kubernetes", "kubernetes_asyncio", "elasticsearch", "boto3", "botocore", "s3fs",
}
_PROBE = textwrap.dedent("""
    import json, runpy, statistics, sys, time
    import airflow.sdk
    from airflow.sdk import DAG, BaseOperator  # the DAG processor has these loaded before parsing
    before = set(sys.modules)
    cpu, wall = time.process_time(), time.perf_counter()
    runpy.run_path(sys.argv[1])
    first = (time.process_time() - cpu, time.perf_counter() - wall)
    imported = sorted(set(sys.modules) - before)
    warm = []
    for _ in range(5):
        cpu, wall = time.process_time(), time.perf_counter()
        runpy.run_path(sys.argv[1])
        warm.append((time.process_time() - cpu, time.perf_counter() - wall))
    print(json.dumps({"first": first, "warm": [statistics.median(w) for w in zip(*warm)], "imported": imported}))
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
  tune:
    depends_on: [prepare]
    framework: lightgbm
    samples: {trials}
    parallel: 16
    search: {{sampler: random, objective: auc}}
    parameters:
      learning_rate: {{min: 0.01, max: 0.3, scale: log}}
      num_leaves: [15, 31, 63]
    command: [python, train.py, --lr, "{{{{learning_rate}}}}", --leaves, "{{{{num_leaves}}}}"]
"""


def parse(path: Path, runs: int = 3) -> dict:
    """The best first parse of ``runs`` fresh interpreters, with the warm parse and imports of that one."""
    results = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", _PROBE, str(path)], capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"parsing {path} failed:\n{done.stderr[-3000:]}")
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return min(results, key=lambda result: result["first"][0])


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
        targets = {f"recipe DAG, {args.trials} trials + search": recipe_dag}
        targets.update({f"dags/{p.name}": p for p in sorted((REPO / "dags").glob("*.py"))})
        results = {name: parse(path) for name, path in targets.items()}

    missed = []
    print(f"{'DAG file':<40} {'first parse (cpu / wall)':>25} {'warm parse (cpu / wall)':>24}   "
          f"targets: first <= {FIRST_MS} ms, warm < {WARM_MS} ms (cpu)")
    for name, result in results.items():
        (first_cpu, first_wall), (warm_cpu, warm_wall) = result["first"], result["warm"]
        print(f"{name:<40} {first_cpu * 1000:>9.0f} / {first_wall * 1000:>6.0f} ms "
              f"{warm_cpu * 1000:>11.0f} / {warm_wall * 1000:>6.0f} ms")
        if first_cpu * 1000 > FIRST_MS:
            missed.append(f"{name}: first parse {first_cpu * 1000:.0f} ms > {FIRST_MS} ms")
        if warm_cpu * 1000 >= WARM_MS:
            missed.append(f"{name}: warm parse {warm_cpu * 1000:.0f} ms >= {WARM_MS} ms")
    print("\nTop-level packages imported by the first parse (beyond airflow.sdk):")
    for name, result in results.items():
        packages = sorted({module.split(".")[0] for module in result["imported"]})
        heavy = [p for p in packages if p in HEAVY]
        print(f"  {name}: {len(result['imported'])} modules; heavy: {', '.join(heavy) or 'none'}")
        print(f"    {', '.join(packages)}")
        if heavy:
            missed.append(f"{name}: imports {', '.join(heavy)} at parse time")
    if missed:
        print("\nMISSED:\n  " + "\n  ".join(missed))
        return 1
    print("\nall DAG files within the targets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
