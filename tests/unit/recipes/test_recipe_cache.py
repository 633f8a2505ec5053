"""Issue 26: what validating a recipe file produces is cached by content, and parse-time validation stays:
a changed file is validated again, so a bad spec or a bad recipe still fails at parse naming the field."""

from __future__ import annotations

import json
import os
import shutil
import textwrap

import pytest

from airflow_ml_provider.recipes import RecipeError, dag_from_recipe
from support import REPO

RECIPE = textwrap.dedent("""\
    version: 1
    name: cached
    seed: 3
    experiments:
      train:
        framework: generic
        samples: 64
        parameters:
          lr: {min: 0.001, max: 0.1, scale: log}
          leaves: [15, 31, 63]
        command: [python, train.py, --lr, "{{lr}}", --leaves, "{{leaves}}", --seed, "{{sample}}"]
      tune:
        depends_on: [train]
        framework: lightgbm
        samples: 8
        search: {sampler: random}
        parameters:
          lr: {min: 0.01, max: 0.3}
        command: [python, tune.py, --lr, "{{lr}}"]
""")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__RECIPE_CACHE_DIR", str(path))
    return path


def trials(dag) -> list[str]:
    return dag.get_task("train").expand_input.value["trial"]


def test_a_recipe_is_validated_once_per_content_and_the_cached_dag_is_the_same(tmp_path, cache_dir, monkeypatch):
    (tmp_path / "r.yaml").write_text(RECIPE)
    first = dag_from_recipe(tmp_path / "r.yaml")
    (entry,) = cache_dir.glob("*.json")
    assert oct(cache_dir.stat().st_mode & 0o777) == "0o700"
    assert len(json.loads(entry.read_text())["trials"]["train"]) == 64

    cached = dag_from_recipe(tmp_path / "r.yaml")  # from the entry
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__RECIPE_CACHE_DIR", "")  # disabled: validated and sampled again
    fresh = dag_from_recipe(tmp_path / "r.yaml")
    for dag in (cached, fresh):
        assert dag.dag_id == first.dag_id == "recipe_cached" and dag.task_ids == first.task_ids
        assert trials(dag) == trials(first)
        assert dag.get_task("tune").search_space == first.get_task("tune").search_space
    assert len(list(cache_dir.glob("*.json"))) == 1


BAD_RECIPE = RECIPE.replace("samples: 64", "samples: 0")
BAD_SPEC = RECIPE.replace("command: [python, train.py,", "command: ['python;id', train.py,")


@pytest.mark.parametrize(("bad", "field"), [(BAD_RECIPE, "7: experiments.train.samples: "),
                                            (BAD_SPEC, "5: experiments.train: ")], ids=["recipe", "spec"])
def test_after_caching_a_good_version_a_bad_edit_fails_at_parse_naming_the_field(tmp_path, cache_dir, airflow_db,
                                                                                 bad, field):
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "dags").mkdir()
    shutil.copy(REPO / "dags" / "ml_recipes.py", tmp_path / "dags")
    (tmp_path / "recipes").mkdir()
    recipe = tmp_path / "recipes" / "r.yaml"
    recipe.write_text(RECIPE)
    assert "recipe_cached" in DagBag(dag_folder=str(tmp_path / "dags")).dag_ids
    assert list(cache_dir.glob("*.json"))

    recipe.write_text(bad)
    bag = DagBag(dag_folder=str(tmp_path / "dags"))
    assert set(bag.dag_ids) == {"invalid_recipe_r"}
    assert f"{recipe}:{field}" in bag.get_dag("invalid_recipe_r").doc_md
    with pytest.raises(RecipeError, match=field):
        dag_from_recipe(recipe)


def test_an_entry_that_is_not_a_valid_recipe_is_not_trusted(tmp_path, cache_dir):
    (tmp_path / "r.yaml").write_text(RECIPE)
    expected = trials(dag_from_recipe(tmp_path / "r.yaml"))
    (entry,) = cache_dir.glob("*.json")
    data = json.loads(entry.read_text())
    for tampered in ("not json", json.dumps({"recipe": {**data["recipe"], "name": "../x"}, "trials": data["trials"]}),
                     json.dumps({**data, "trials": {"other": []}}), json.dumps({**data, "trials": {"train": [1]}})):
        entry.write_text(tampered)
        dag = dag_from_recipe(tmp_path / "r.yaml")
        assert dag.dag_id == "recipe_cached" and trials(dag) == expected


def test_a_cache_folder_others_can_write_is_not_used(tmp_path, cache_dir):
    cache_dir.mkdir(mode=0o700)
    os.chmod(cache_dir, 0o777)
    (tmp_path / "r.yaml").write_text(RECIPE)
    dag_from_recipe(tmp_path / "r.yaml")
    assert list(cache_dir.iterdir()) == []
