"""Recipe Params (issue 25 D11): what a recipe marks as overridable becomes a Param of its DAG, typed and
bounded like the pipeline's; a wrong value is refused naming the Param in its own words, by the server (as
the DAG serialized for it holds the Params) and by the form's schema; a recipe whose Params make no sense
is refused at its YAML path. A mapped experiment with ``best:`` gets its best-trial task."""

from __future__ import annotations

import textwrap

import jsonschema
import pytest
from airflow.sdk.exceptions import ParamValidationError

from airflow_ml_provider.operators.recipe import fill_at_run
from airflow_ml_provider.recipes import RecipeError, parse_recipe
from airflow_ml_provider.recipes.dag import build_dag, dag_from_recipe
from airflow_ml_provider.search.template import placeholder
from support import REPO


def recipe(params: str, command: str = '[python, t.py, "{{params.rows}}"]', extra: str = "") -> str:
    return textwrap.dedent("""\
        version: 1
        name: params_unit
        params:
        {params}
        experiments:
          train:
            framework: generic
            command: {command}
        {extra}""").format(params=textwrap.indent(textwrap.dedent(params), "  "), command=command,
                           extra=textwrap.indent(textwrap.dedent(extra), "    "))


ROWS = """\
rows: {type: integer, default: 100, minimum: 10, maximum: 1000, title: Rows, description: Rows to generate.}
"""


def as_served(dag):
    """The DAG as the API server holds it: triggering validates the conf against its Params."""
    from airflow.serialization.serialized_objects import DagSerialization

    return DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))


@pytest.fixture(scope="module")
def served():
    return as_served(dag_from_recipe(REPO / "recipes" / "lightgbm_sweep.yaml"))


def test_the_shipped_sweep_offers_its_params_with_their_defaults(served):
    assert served.params.deep_merge({}).validate() == {"rows": 20000, "features": 20}
    assert served.params.get_param("rows").schema["title"] == "Rows"


@pytest.mark.parametrize(("value", "words"), [
    (0, "Rows: a whole number from 1000 to 200000."),
    (10**9, "Rows: a whole number from 1000 to 200000."),
    ("abc", "Invalid input for param rows"),
    (5000.5, "Invalid input for param rows"),
    ("20000; rm -rf /", "Invalid input for param rows"),
])
def test_a_wrong_value_is_refused_in_the_params_own_words_never_clamped(served, value, words):
    with pytest.raises(ParamValidationError) as refused:
        served.params.deep_merge({"rows": value}).validate()
    assert "Invalid input for param rows" in str(refused.value) and words in str(refused.value)
    with pytest.raises(jsonschema.ValidationError):  # what the trigger form checks
        jsonschema.validate(value, served.params.get_param("rows").schema)


def test_string_and_enum_params_bound_their_text():
    dag = as_served(build_dag(parse_recipe(recipe("""\
        label: {type: string, default: a b, max_length: 5}
        mode: {type: string, default: fast, enum: [fast, slow]}
        """, '[python, t.py, "{{params.label}}", "{{params.mode}}"]'))))
    assert dag.params.deep_merge({"label": "ü é", "mode": "slow"}).validate() == {"label": "ü é", "mode": "slow"}
    for name, value in (("label", "x" * 6), ("mode", "medium")):
        with pytest.raises(ParamValidationError, match=f"Invalid input for param {name}"):
            dag.params.deep_merge({name: value}).validate()


@pytest.mark.parametrize(("params", "command", "path", "message"), [
    ("rows: {type: integer, default: 5}", None, "params.rows", "needs minimum and maximum"),
    ("rows: {type: integer, default: 5000, minimum: 10, maximum: 1000}", None, "params.rows",
     "default: must be from 10 to 1000"),
    ("rows: {type: integer, default: 1.5, minimum: 1, maximum: 3}", None, "params.rows", "default: is not an integer"),
    ("rows: {type: string, default: 5}", None, "params.rows", "default: is not a string"),
    ("rows: {type: string, default: x, minimum: 1, maximum: 2}", None, "params.rows", "bound numbers"),
    ("rows: {type: boolean, default: true, enum: [true]}", None, "params.rows", "takes no enum"),
    ('rows: {type: string, default: "a\\nb"}', None, "params.rows", "no control character"),
    (ROWS, '[python, t.py, "{{params.row}}"]', "experiments.train.command[2]", "names no Param of this recipe"),
    (ROWS, "[python, t.py]", "params.rows", "never used in a command"),
])
def test_a_param_that_makes_no_sense_is_refused_at_its_path(params, command, path, message):
    with pytest.raises(RecipeError) as refused:
        parse_recipe(recipe(params, command) if command else recipe(params))
    assert any(issue.path == path and message in issue.message for issue in refused.value.issues), refused.value


def test_a_search_reports_its_own_best_trial():
    with pytest.raises(RecipeError, match="a search reports its best trial itself"):
        parse_recipe(recipe(ROWS, '[python, t.py, "{{params.rows}}", "{{lr}}"]', """\
            samples: 2
            parameters: {lr: {min: 0.1, max: 0.2}}
            search: {objective: auc}
            best: {metric: auc, direction: maximize}
            """))


def test_params_stay_placeholders_until_the_trial_runs_and_are_filled_in_once():
    trial = parse_recipe(recipe(ROWS)).trials("train")[0]
    assert trial.argv == ["python", "t.py", "{{params.rows}}"]
    hostile = "{{run_dir}} {{params.rows}}"
    assert fill_at_run(["a={{params.rows}}", "{{run_dir}}/x", "{{params.other}}"], "/data/run", {"rows": hostile}) == [
        f"a={hostile}", "/data/run/x", "{{params.other}}"]


def test_a_mapped_experiment_with_best_gets_its_best_trial_task():
    dag = dag_from_recipe(REPO / "recipes" / "lightgbm_sweep.yaml")
    best = dag.get_task("sweep.best")
    assert (best.experiment, best.metric, best.direction, best.trigger_rule) == ("sweep", "loss", "minimize", "all_done")
    assert best.upstream_task_ids == {"sweep"}
    assert "The task sweep\\.best reports the best trial of sweep by loss (minimize)" in dag.doc_md
    assert "| rows | integer | 20000 | 1000 to 200000 |" in dag.doc_md


def test_a_search_fills_the_params_into_its_trials_command():
    dag = build_dag(parse_recipe(recipe(ROWS, '[python, t.py, "{{params.rows}}", "{{lr}}"]', """\
        samples: 2
        parameters: {lr: {min: 0.1, max: 0.2}}
        search: {objective: auc}
        """)))
    search = dag.get_task("train")
    search._param_values = {"rows": "{{run_dir}} 500"}  # what execute() sets from the checked Params
    command = search._render_trial({}, None).command
    assert command == ["python", "t.py", "{{run_dir}} 500", placeholder("lr")]  # lr: the search's to fill
