"""Issue 26: a DAG file's parse imports only what building its DAGs needs, and still refuses a bad job spec,
naming the field (the recipe side: tests/unit/recipes/test_recipe_cache.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from support import REPO

DAG_FILE = textwrap.dedent("""\
    from airflow.sdk import DAG
    from airflow_ml_provider.operators.training import TrainingJobOperator

    with DAG("bad_spec", schedule=None):
        TrainingJobOperator(task_id="train", command=["python", "train.py"], {argument})
""")


@pytest.mark.parametrize(("argument", "named"), [
    ('job={"resources": {"cpu": -1}}', "train: job.resources.cpu: Input should be greater than 0"),
    ('job={"backend": "local", "imagee": "x"}', "train: job.imagee: Extra inputs are not permitted"),
    ('follow={"rules": {"fail_on": ["("]}}', "train: fail_on[0]: invalid regular expression '('"),
], ids=["resources", "unknown-field", "log-rule"])
def test_a_bad_spec_fails_the_dag_file_at_parse_naming_the_field(tmp_path, airflow_db, argument, named):
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "bad_spec.py").write_text(DAG_FILE.format(argument=argument))
    bag = DagBag(dag_folder=str(tmp_path))
    assert bag.dag_ids == []
    (error,) = bag.import_errors.values()
    assert named in error


# Only a task's execution needs these: submitting and following its job, the triggerer's side, log stores.
EXECUTION_ONLY = (
    "airflow_ml_provider.operators.job_runner", "airflow_ml_provider.jobs.drivers",
    "airflow_ml_provider.jobs.follow", "airflow_ml_provider.logs.metrics",
    "airflow_ml_provider.jobs.preemption", "airflow_ml_provider.triggers.training_job",
    "airflow_ml_provider.hooks.elasticsearch_logs", "airflow_ml_provider.search.runner",
)
# Packages a DAG file's parse must never import (the DAG processor pays every import on every cycle): the
# training frameworks, MLflow, Optuna, numpy, cluster and cloud clients (benchmarks/dag_parse.py's HEAVY).
HEAVY = {
    "tensorflow", "keras", "horovod", "lightgbm", "mlflow", "matplotlib", "sklearn", "pandas", "numpy", "torch",
    "optuna", "kubernetes", "kubernetes_asyncio", "elasticsearch", "boto3", "botocore", "s3fs",
}
_PARSE = """
import json, runpy, sys
import airflow.sdk
before = set(sys.modules)
runpy.run_path(sys.argv[1])
print(json.dumps(sorted(set(sys.modules) - before)))
"""


@pytest.mark.parametrize("dag_file", sorted(p.name for p in (REPO / "dags").glob("*.py")))
def test_parsing_a_dag_file_imports_nothing_only_execution_needs(dag_file):
    done = subprocess.run([sys.executable, "-c", _PARSE, str(REPO / "dags" / dag_file)], capture_output=True,
                          text=True, check=True, timeout=300)
    imported = set(json.loads(done.stdout.splitlines()[-1]))
    assert sorted(imported & set(EXECUTION_ONLY)) == []
    assert sorted({module.split(".")[0] for module in imported} & HEAVY) == []
