"""Every DAG in dags/ (including one per recipe in recipes/) loads, and parsing imports nothing heavy."""

from __future__ import annotations

import json
import subprocess
import sys

from airflow_ml_provider.recipes import load_recipe
from support import REPO

HEAVY = ("tensorflow", "keras", "horovod", "lightgbm", "mlflow", "matplotlib", "sklearn", "pandas")
_PARSE = """
import json, runpy, sys
import airflow.sdk
before = set(sys.modules)
for path in sys.argv[1:]:
    runpy.run_path(path)
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_every_dag_file_loads_without_import_errors(airflow_db):  # DagBag reads the metadata DB
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    recipes = {load_recipe(path).dag_id for path in (REPO / "recipes").glob("*.yaml")}
    assert {"ml_quickstart", "ml_training_pipeline"} | recipes <= set(bag.dag_ids)
    for dag_id in bag.dag_ids:
        assert bag.get_dag(dag_id).tags, f"{dag_id} has no tags"


def test_parsing_the_dags_imports_no_training_or_registry_library():
    files = sorted(str(p) for p in (REPO / "dags").glob("*.py"))
    done = subprocess.run([sys.executable, "-c", _PARSE, *files], capture_output=True, text=True, check=True)
    heavy = [m for m in json.loads(done.stdout.splitlines()[-1]) if m.split(".")[0] in HEAVY]
    assert heavy == [], f"imported at parse time: {heavy}"
