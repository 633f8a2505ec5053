"""A recipe's ``image`` runs only if it is one of the deployment's images (issue 38): the list is the training
connection's, so it is checked when the task runs (a DAG's parse reads no connection), refusing for good and
naming the recipe field; an allowed image runs. Real recipe DAGs (tests/dags/ml_recipe_image_test_dags.py)
with dag.test() on the local backend."""

from __future__ import annotations

import os
import sys

import pytest
from dag_runs import load_dag, run

from support import TEST_DAGS, TRAINING_IMAGE, needs_training_env

pytestmark = [pytest.mark.integration, needs_training_env]

DAGS = TEST_DAGS / "ml_recipe_image_test_dags.py"


def test_an_image_outside_the_deployments_list_is_refused_naming_the_recipe_field(airflow_db, capfd):
    assert os.path.realpath(sys.prefix) != os.path.realpath(TRAINING_IMAGE)  # a real environment, not listed
    result = run(load_dag(DAGS, "image_refused"))
    assert result.states == {("mapped", 0): "failed", ("searched", -1): "failed"}, result.states
    log = capfd.readouterr().out
    for experiment in ("mapped", "searched"):
        assert (f"{experiment}: experiments.{experiment}.image: not one of the images this deployment allows on "
                f"backend local ({TRAINING_IMAGE}: the connection's local_image") in log
    assert "[rank 0] the job ran" not in log, "no job ran"


def test_an_image_of_the_deployment_runs(airflow_db, capfd):
    result = run(load_dag(DAGS, "image_allowed"))
    assert result.states == {("mapped", 0): "success", ("searched", -1): "success"}, result.states
    assert "[rank 0] the job ran" in capfd.readouterr().out
