"""dags/ml_recipes.py over a folder of recipes: one bad file becomes its own failing DAG, the others load."""

from __future__ import annotations

import shutil
import textwrap

import pytest
from airflow.sdk.exceptions import AirflowFailException

from support import REPO

GOOD = textwrap.dedent("""\
    version: 1
    name: folder_good_recipe
    experiments:
      train:
        framework: generic
        command: [python, train.py]
""")
BOMB = "version: 1\nname: folder_bomb\n" + 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{level}: &{level} [{', '.join([f'*{previous}'] * 10)}]\n" for previous, level in zip("abcdefgh", "bcdefghi")
) + "experiments: {x: {framework: generic, command: [python, '{{p}}'], parameters: {p: *i}}}\n"


@pytest.fixture
def dag_folder(tmp_path):
    """The shipped dags/ml_recipes.py beside a recipes/ folder of our own (it reads ../recipes)."""
    (tmp_path / "dags").mkdir()
    shutil.copy(REPO / "dags" / "ml_recipes.py", tmp_path / "dags")
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "good.yaml").write_text(GOOD)
    (tmp_path / "recipes" / "bomb.yaml").write_text(BOMB)
    (tmp_path / "recipes" / "same_name.yaml").write_text(GOOD)
    return tmp_path


def test_a_bad_recipe_is_its_own_failing_dag_and_the_others_load(dag_folder, airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(dag_folder / "dags"))

    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {"recipe_folder_good_recipe", "invalid_recipe_bomb", "invalid_recipe_same_name"}
    warnings = "\n".join(bag.captured_warnings[str(dag_folder / "dags" / "ml_recipes.py")])
    assert f"{dag_folder / 'recipes' / 'bomb.yaml'}:" in warnings and "same_name.yaml" in warnings

    bomb = bag.get_dag("invalid_recipe_bomb")
    assert bomb.description.startswith("INVALID RECIPE bomb.yaml")
    with pytest.raises(AirflowFailException) as failed:
        bomb.get_task("invalid_recipe").execute({})
    assert str(failed.value).startswith(f"{dag_folder / 'recipes' / 'bomb.yaml'}:7: e: not valid YAML: expands "
                                        "to more than 100000 values")
    with pytest.raises(AirflowFailException, match=r"same_name.yaml:1: name: the DAG id 'recipe_folder_good_recipe' "
                                                   r"is already the recipe good.yaml's"):
        bag.get_dag("invalid_recipe_same_name").get_task("invalid_recipe").execute({})


def test_error_text_in_the_dag_docs_is_code_never_markup(tmp_path):
    from airflow_ml_provider.recipes.dag import invalid_recipe_dag

    dag = invalid_recipe_dag(tmp_path / "x y`.yaml", "x.yaml:1: name: '<img src=x onerror=alert(1)>'\n```\n# h")
    assert dag.dag_id == "invalid_recipe_x_y_"
    body = dag.doc_md.split("\n\n", 1)[1]
    assert all(line.startswith("    ") for line in body.splitlines())  # an indented code block, whatever it holds


def test_the_recipes_folder_setting_is_read_and_a_missing_folder_is_a_warning(dag_folder, airflow_db, monkeypatch):
    """``[ml_training] recipes_folder`` names the folder (here: beside the DAG file, as a dags folder alone
    would hold it); a folder that does not exist is a warning on the DAG file, not silence."""
    from airflow.dag_processing.dagbag import DagBag

    (dag_folder / "recipes").rename(dag_folder / "dags" / "team_recipes")
    dag_file = str(dag_folder / "dags" / "ml_recipes.py")
    bag = DagBag(dag_folder=str(dag_folder / "dags"))
    assert not [d for d in bag.dag_ids if "recipe" in d]
    [warning] = bag.captured_warnings[dag_file]
    assert warning.endswith(f"RecipeWarning: no recipes: the recipes folder {dag_folder / 'recipes'} is not a folder "
                            "(set [ml_training] recipes_folder)")

    monkeypatch.setenv("AIRFLOW__ML_TRAINING__RECIPES_FOLDER", "team_recipes")  # relative to the DAG file's folder
    bag = DagBag(dag_folder=str(dag_folder / "dags"))
    assert "recipe_folder_good_recipe" in bag.dag_ids and bag.import_errors == {}
    assert all("is not a folder" not in warning for warning in bag.captured_warnings.get(dag_file, []))
