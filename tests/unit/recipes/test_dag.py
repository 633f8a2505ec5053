"""dag_from_recipe: one mapped task per experiment, one map index per trial, nothing templated."""

from __future__ import annotations

import json
import textwrap

import pytest

from airflow_ml_provider.operators.recipe import RecipeTrialOperator
from airflow_ml_provider.recipes import RecipeError, dag_from_recipe

RECIPE = textwrap.dedent("""\
    version: 1
    name: unit_recipe_dag
    backend: local
    experiments:
      prepare:
        framework: generic
        command: [python, prep.py]
      train:
        depends_on: [prepare]
        framework: lightgbm
        workers: 3
        samples: 5
        parallel: 2
        retries: 1
        hardware: {cpu: 2, memory: 1Gi}
        env: {OMP_NUM_THREADS: "1"}
        parameters:
          lr: {min: 0.01, max: 0.1}
          note: ["{{ 7 * 7 }}", "$(id)"]
        command: [python, train.py, --lr, "{{lr}}", --note, "{{note}}"]
""")


@pytest.fixture
def recipe_file(tmp_path):
    path = tmp_path / "recipes" / "unit.yaml"
    path.parent.mkdir()
    path.write_text(RECIPE)
    return path


def test_experiments_become_mapped_tasks_with_dependencies(recipe_file):
    dag = dag_from_recipe(recipe_file)
    assert dag.dag_id == "recipe_unit_recipe_dag" and {"ml", "recipe"} <= set(dag.tags)
    prepare, train = dag.task_dict["prepare"], dag.task_dict["train"]
    assert train.upstream_task_ids == {"prepare"}
    trials = [json.loads(t) for t in train.expand_input.value["trial"]]
    assert len(trials) == 5 and len(prepare.expand_input.value["trial"]) == 1
    assert all(t["argv"][:3] == ["python", "train.py", "--lr"] for t in trials)
    assert {t["argv"][5] for t in trials} == {"{{ 7 * 7 }}", "$(id)"}
    partial = train.partial_kwargs
    assert (partial["framework"], partial["num_workers"], partial["job"]["backend"]) == ("lightgbm", 3, "local")
    assert partial["job"]["resources"] == {"cpu": 2.0, "memory": "1Gi"}
    assert partial["job"]["env"] == {"OMP_NUM_THREADS": "1"}
    assert (partial["retries"], partial["max_active_tis_per_dagrun"]) == (1, 2)


def test_recipe_values_are_never_rendered_as_templates():
    operator = RecipeTrialOperator(
        task_id="t",
        trial={"params": {"v": "{{ 7 * 7 }}"}, "argv": ["p", "{{ 7 * 7 }}"]},
        job={"image": "{{ 6 * 7 }}", "env": {"X": "{{ ds }}"}},
    )
    assert operator.template_fields == ("manifest",)
    operator._do_render_template_fields(operator, operator.template_fields, {"ds": "2026-01-01"}, None, set())
    assert (operator.command, operator.job["image"], operator.job["env"]) == (
        ["p", "{{ 7 * 7 }}"],
        "{{ 6 * 7 }}",
        {"X": "{{ ds }}"},
    )
    assert operator.trial_label == "v={{ 7 * 7 }}"


def test_the_dag_serializes_and_round_trips(recipe_file):
    from airflow.serialization.serialized_objects import DagSerialization

    dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag_from_recipe(recipe_file)))
    assert set(dag.task_dict) == {"prepare", "train"}


def test_relative_paths_resolve_from_the_calling_dag_files_parent(recipe_file):
    dags = recipe_file.parents[1] / "dags"
    dags.mkdir()
    (dags / "recipe_dag.py").write_text(
        "from airflow_ml_provider.recipes import dag_from_recipe\n"
        "dag = dag_from_recipe('recipes/unit.yaml')\n"
    )
    import runpy

    assert runpy.run_path(str(dags / "recipe_dag.py"))["dag"].dag_id == "recipe_unit_recipe_dag"


def test_a_missing_or_invalid_recipe_fails_the_dag_file_with_the_reason(recipe_file):
    with pytest.raises(FileNotFoundError, match="looked in"):
        dag_from_recipe("no/such/recipe.yaml")
    recipe_file.write_text(RECIPE.replace("workers: 3", "workers: -3"))
    with pytest.raises(RecipeError, match=r"unit.yaml:\d+: experiments.train.workers"):
        dag_from_recipe(recipe_file)
