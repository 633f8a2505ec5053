"""Issue 19 H3/L8: recipe DAG ids live in their own namespace (``recipe_<name>``), parsed the way the DAG
processor does (each DAG file on its own, as its per-file processes do) and as one DagBag over the folder.

Before: a recipe named ``ml_training_pipeline`` took that DAG id (the DAG flipped between the recipe and the
shipped file at each parse, with no error), and a valid recipe named ``invalid_recipe_zz`` was silently
replaced by the placeholder of a broken ``zz.yaml``.
"""

from __future__ import annotations

import shutil
import textwrap

import pytest
from airflow.sdk.exceptions import AirflowFailException

from support import REPO

HOSTILE = textwrap.dedent("""\
    version: 1
    name: ml_training_pipeline
    experiments:
      train:
        framework: generic
        command: [python, -c, "print('the recipe ran instead of the shipped pipeline')"]
""")
NAMED_LIKE_A_PLACEHOLDER = HOSTILE.replace("name: ml_training_pipeline", "name: invalid_recipe_zz")
BROKEN = "version: 1\nname: zz\nexperiments: {train: {framework: generic}}\n"  # no command


@pytest.fixture
def dags_folder(tmp_path):
    """A copy of the shipped dags/ and recipes/, plus hostile recipes."""
    shutil.copytree(REPO / "dags", tmp_path / "dags", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "recipes", tmp_path / "recipes")
    (tmp_path / "recipes" / "ml_training_pipeline.yaml").write_text(HOSTILE)
    (tmp_path / "recipes" / "invalid_recipe_zz.yaml").write_text(NAMED_LIKE_A_PLACEHOLDER)
    (tmp_path / "recipes" / "zz.yaml").write_text(BROKEN)
    (tmp_path / "recipes" / "zz_same_name.yaml").write_text(HOSTILE)  # a second recipe with the same name
    return tmp_path / "dags"


def test_each_dag_file_parsed_alone_owns_disjoint_dag_ids(dags_folder, airflow_db):
    """The DAG processor parses every file in its own process: an id produced by two files is what made the
    DAG flip between them. Each file here parses alone, as it does there."""
    from airflow.dag_processing.dagbag import DagBag

    owners: dict[str, str] = {}
    for path in sorted(dags_folder.glob("*.py")):
        bag = DagBag(dag_folder=str(path))
        assert bag.import_errors == {}, path
        for dag_id in bag.dag_ids:
            assert dag_id not in owners, f"{dag_id} is produced by {owners.get(dag_id)} and {path.name}"
            owners[dag_id] = path.name
    assert owners["ml_training_pipeline"] == "ml_training_pipeline.py"
    assert owners["recipe_ml_training_pipeline"] == "ml_recipes.py"
    assert owners["recipe_invalid_recipe_zz"] == "ml_recipes.py"  # the valid recipe, kept beside ...
    assert owners["invalid_recipe_zz"] == "ml_recipes.py"  # ... the placeholder of the broken zz.yaml
    assert {"recipe_mnist", "recipe_lightgbm_sweep"} <= set(owners)


def test_one_dagbag_over_the_folder_keeps_the_shipped_dag_and_refuses_the_second_recipe_name(dags_folder,
                                                                                           airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(dags_folder))

    assert bag.import_errors == {}
    shipped = bag.get_dag("ml_training_pipeline")
    assert shipped.fileloc == str(dags_folder / "ml_training_pipeline.py")
    assert "train" not in shipped.task_ids or shipped.get_task("train").task_type != "RecipeTrialOperator"
    recipe = bag.get_dag("recipe_ml_training_pipeline")
    assert recipe.fileloc == str(dags_folder / "ml_recipes.py") and recipe.task_ids == ["train"]
    assert bag.get_dag("recipe_invalid_recipe_zz").task_ids == ["train"]
    with pytest.raises(AirflowFailException, match=r"zz.yaml:3: experiments.train.command: required field"):
        bag.get_dag("invalid_recipe_zz").get_task("invalid_recipe").execute({})

    # the second file naming ml_training_pipeline is refused, naming both files, visibly
    warnings = "\n".join(bag.captured_warnings[str(dags_folder / "ml_recipes.py")])
    refusal = (f"{dags_folder.parent / 'recipes' / 'zz_same_name.yaml'}:1: name: the DAG id "
               "'recipe_ml_training_pipeline' is already the recipe ml_training_pipeline.yaml's")
    assert refusal in warnings
    with pytest.raises(AirflowFailException) as failed:
        bag.get_dag("invalid_recipe_zz_same_name").get_task("invalid_recipe").execute({})
    assert refusal in str(failed.value)


def test_placeholders_of_files_whose_stems_read_the_same_do_not_replace_each_other(tmp_path):
    from airflow_ml_provider.recipes.dag import dags_from_folder

    for name in ("a b.yaml", "a_b.yaml", "a?b.yaml"):
        (tmp_path / name).write_text("not: [a recipe\n")
    with pytest.warns(UserWarning):
        dags = dags_from_folder(tmp_path)
    assert len(dags) == 3 and all(dag_id.startswith("invalid_recipe_a_b") for dag_id in dags)
    assert sorted(dag.description for dag in dags.values()) == [
        f"INVALID RECIPE {name}: fix it (airflow-ml validate) to get its DAG" for name in ("a b.yaml", "a?b.yaml",
                                                                                          "a_b.yaml")]


def test_no_shipped_dag_file_uses_the_recipe_namespaces(airflow_db):
    """``recipe_`` and ``invalid_recipe_`` are reserved for recipes: another DAG file using one could collide."""
    from airflow.dag_processing.dagbag import DagBag

    for path in sorted((REPO / "dags").glob("*.py")):
        if path.name != "ml_recipes.py":
            bag = DagBag(dag_folder=str(path))
            assert not [d for d in bag.dag_ids if d.startswith(("recipe_", "invalid_recipe_"))], path
