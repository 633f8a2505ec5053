"""Issue 19 M4 (recipe side): budgets enforced where the work is created, with the real recipes DAG file over a
folder holding a hostile recipe beside good ones (parsed by a DagBag, as the DAG processor parses it).

Before: a 4.4 KB recipe that `validate` accepted (one experiment aliased 400 times: 4,000,000 jobs) made the
recipes DAG file hit the DAG processor's timeout, and every recipe DAG disappeared. The timeout marks only stop
the old behaviour (a parse of minutes); the assertions are about outcomes. Elapsed times are printed.
"""

from __future__ import annotations

import shutil
import textwrap
import time

import pytest

from airflow_ml_provider.cli import main
from airflow_ml_provider.recipes import RecipeError, load_recipe, parse_recipe
from support import REPO

ALIASED = "version: 1\nname: aliased\nexperiments:\n" + "  e000: &e {framework: generic, samples: 10000, " \
    "command: [python, t.py]}\n" + "".join(f"  e{i:03}: *e\n" for i in range(1, 400))


def good(name: str, samples: int = 1) -> str:
    return textwrap.dedent(f"""\
        version: 1
        name: {name}
        experiments:
          train:
            framework: generic
            samples: {samples}
            command: [python, train.py, --seed, "{{{{sample}}}}"]
    """)


def slow(experiments: int = 30) -> str:
    """Within every job budget raised below, but many seconds of CPU to expand (10,000 trials per experiment)."""
    args = ", ".join(f"--a{i}, '{{{{p}}}}-{i}'" for i in range(20))
    return ("version: 1\nname: slow\nexperiments:\n"
            f"  e00: &e {{framework: generic, samples: 10000, parameters: {{p: {{min: 0, max: 1}}}}, "
            f"command: [python, train.py, {args}]}}\n" + "".join(f"  e{i:02}: *e\n" for i in range(1, experiments)))


@pytest.fixture
def folder(tmp_path):
    """The shipped dags/ml_recipes.py beside an empty recipes/ folder of our own (it reads ../recipes)."""
    (tmp_path / "dags").mkdir()
    shutil.copy(REPO / "dags" / "ml_recipes.py", tmp_path / "dags")
    (tmp_path / "recipes").mkdir()
    return tmp_path


def parse(folder):
    from airflow.dag_processing.dagbag import DagBag

    started = time.process_time()
    bag = DagBag(dag_folder=str(folder / "dags"))
    print(f"parsed {sorted(bag.dag_ids)} in {time.process_time() - started:.2f} s of CPU")
    assert bag.import_errors == {}
    return bag


def refusal(bag, dag_id: str) -> str:
    return bag.get_dag(dag_id).doc_md


@pytest.mark.timeout(120)
def test_the_aliased_four_million_job_recipe_is_refused_before_expansion(folder, airflow_db):
    assert len(ALIASED) <= 4500  # 4.4 KB
    (folder / "recipes" / "aliased.yaml").write_text(ALIASED)
    (folder / "recipes" / "good.yaml").write_text(good("good"))

    bag = parse(folder)
    assert set(bag.dag_ids) == {"recipe_good", "invalid_recipe_aliased"}
    message = ("experiments: the recipe creates 4000000 jobs, over the budget of 10000 per recipe file "
               "([ml_training] recipe_max_jobs_per_file)")
    assert message in refusal(bag, "invalid_recipe_aliased")

    started = time.process_time()
    with pytest.raises(RecipeError) as raised:
        load_recipe(folder / "recipes" / "aliased.yaml")
    print(f"refused in {(time.process_time() - started) * 1000:.0f} ms of CPU")
    assert message in str(raised.value)
    assert main(["validate", str(folder / "recipes" / "aliased.yaml")]) == 1


def test_a_search_over_its_trial_budget_is_refused_and_the_budget_is_configurable(monkeypatch):
    recipe = good("search", samples=5000) + "    search: {sampler: random}\n"
    with pytest.raises(RecipeError, match=r"<recipe>:6: experiments.train.samples: a search of 5000 trials is "
                                          r"over the budget of 4096 \(\[ml_training\] recipe_max_search_trials\)"):
        parse_recipe(recipe.replace('"{{sample}}"', "'{{lr}}'") + "    parameters: {lr: {min: 0.1, max: 1}}\n")
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__RECIPE_MAX_SEARCH_TRIALS", "5000")
    parse_recipe(recipe.replace('"{{sample}}"', "'{{lr}}'") + "    parameters: {lr: {min: 0.1, max: 1}}\n")


def test_the_folder_job_budget_refuses_the_file_that_would_pass_it(folder, airflow_db, monkeypatch):
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__RECIPE_MAX_JOBS_PER_FOLDER", "10")
    for name in ("a", "b", "c"):
        (folder / "recipes" / f"{name}.yaml").write_text(good(name, samples=4))

    bag = parse(folder)
    assert set(bag.dag_ids) == {"recipe_a", "recipe_b", "invalid_recipe_c"}
    assert ("c.yaml:1: experiments: its 4 jobs would bring the recipes folder to 12, over the budget of 10 "
            "([ml_training] recipe_max_jobs_per_folder)") in refusal(bag, "invalid_recipe_c")


@pytest.mark.timeout(300)
def test_a_recipe_over_its_parse_time_fails_alone_and_the_others_load(folder, airflow_db, monkeypatch):
    """0.2 s of CPU per file: the good files need a few milliseconds, the slow one many seconds."""
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__RECIPE_PARSE_SECONDS", "0.2")
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__RECIPE_MAX_JOBS_PER_FILE", "1000000")
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__RECIPE_MAX_JOBS_PER_FOLDER", "1000000")
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__RECIPE_FOLDER_PARSE_SECONDS", "600")
    (folder / "recipes" / "a_good.yaml").write_text(good("a_good"))
    (folder / "recipes" / "b_slow.yaml").write_text(slow())
    (folder / "recipes" / "c_good.yaml").write_text(good("c_good"))

    bag = parse(folder)
    assert set(bag.dag_ids) == {"recipe_a_good", "invalid_recipe_b_slow", "recipe_c_good"}  # no half-built DAG
    assert ("took more than 0.2 s of CPU ([ml_training] recipe_parse_seconds); it was stopped so the other "
            "recipes load") in refusal(bag, "invalid_recipe_b_slow")


def test_once_the_folder_budget_is_spent_the_remaining_files_are_refused(folder, airflow_db, monkeypatch):
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__RECIPE_FOLDER_PARSE_SECONDS", "0.000001")
    (folder / "recipes" / "a.yaml").write_text(good("a"))
    bag = parse(folder)
    assert set(bag.dag_ids) == {"invalid_recipe_a"}
    assert "the recipes folder's parse budget of 1e-06 s is spent ([ml_training] recipe_folder_parse_seconds)" \
        in refusal(bag, "invalid_recipe_a")


def test_a_search_recipes_parallel_over_the_search_bound_is_refused_at_its_line_by_validate_and_the_dag_file(
        folder, airflow_db, monkeypatch):
    """Before: `airflow-ml validate` said ok to ``parallel: 30`` and the recipes DAG file refused it only while
    building the DAG, with a placeholder saying "SearchSpaceError" and no YAML path."""
    search = good("wide", samples=40).replace('"{{sample}}"', "'{{lr}}'") + (
        "    parallel: 30\n    search: {sampler: random}\n    parameters: {lr: {min: 0.1, max: 1}}\n")
    (folder / "recipes" / "wide.yaml").write_text(search)
    (folder / "recipes" / "narrow.yaml").write_text(search.replace("wide", "narrow").replace("parallel: 30",
                                                                                            "parallel: 16"))
    message = ("wide.yaml:8: experiments.train.parallel: 30 trial jobs at once is more than the 16 allowed per "
               "search ([ml_training] search_max_parallel)")

    assert main(["validate", str(folder / "recipes" / "wide.yaml")]) == 1
    assert main(["validate", str(folder / "recipes" / "narrow.yaml")]) == 0
    bag = parse(folder)
    assert set(bag.dag_ids) == {"recipe_narrow", "invalid_recipe_wide"}
    assert message in refusal(bag, "invalid_recipe_wide")

    monkeypatch.setenv("AIRFLOW__ML_TRAINING__SEARCH_MAX_PARALLEL", "30")  # the bound every search has
    assert set(parse(folder).dag_ids) == {"recipe_narrow", "recipe_wide"}
