"""Parsing recipe DAGs (a search experiment included) imports no search, training, registry or cluster library:
search spaces are validated without Optuna, which loads only when a search runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from support import REPO

HEAVY = {"optuna", "numpy", "mlflow", "tensorflow", "keras", "horovod", "lightgbm", "sklearn", "pandas",
         "matplotlib", "kubernetes", "kubernetes_asyncio", "elasticsearch", "boto3", "botocore"}
RECIPE = textwrap.dedent("""\
    version: 1
    name: parse_imports_recipe
    experiments:
      tune:
        framework: lightgbm
        samples: 64
        search: {sampler: tpe, objective: auc}
        parameters:
          learning_rate: {min: 0.01, max: 0.3, scale: log}
          num_leaves: [15, 31, 63]
        command: [python, train.py, --lr, "{{learning_rate}}", --leaves, "{{num_leaves}}"]
""")
_PARSE = """
import json, runpy, sys
import airflow.sdk
before = set(sys.modules)
for path in sys.argv[1:]:
    runpy.run_path(path)
print(json.dumps(sorted({m.split(".")[0] for m in set(sys.modules) - before})))
"""


def test_recipe_dags_parse_without_heavy_imports(tmp_path):
    (tmp_path / "recipe.yaml").write_text(RECIPE)
    (tmp_path / "recipe_dag.py").write_text(
        f"from airflow_ml_provider.recipes import dag_from_recipe\ndag = dag_from_recipe({str(tmp_path / 'recipe.yaml')!r})\n"
    )
    files = [str(tmp_path / "recipe_dag.py"), str(REPO / "dags" / "ml_recipes.py")]
    done = subprocess.run([sys.executable, "-c", _PARSE, *files], capture_output=True, text=True, check=True)
    imported = set(json.loads(done.stdout.splitlines()[-1]))
    assert "airflow_ml_provider" in imported
    assert imported & HEAVY == set()
