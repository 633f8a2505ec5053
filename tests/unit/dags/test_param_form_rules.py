"""Issue 45 D2, D3, D8, D9: the shipped DAGs' Params as Airflow's trigger form and API server read them (the DAG
serialized as the API server holds it). A field whose default is valid carries no "required" star (the form's
rule, in airflow/ui: a star where ``schema.type`` is set and is not a list holding "null"), yet an emptied field
(null) is refused at trigger; every Param says what it is; a refusal reads in the Param's words
(``plugins.param_words``, which rewrites the API server's answer)."""

from __future__ import annotations

import runpy

import pytest
from airflow.sdk.exceptions import ParamValidationError

from airflow_ml_provider.plugins.param_words import refusal_words
from support import REPO

DAGS = ("ml_training_pipeline.py", "ml_quickstart.py", "ml_batch_scoring.py")
EMPTY_MEANS_DEFAULT = {"backend", "image", "data_path", "notes", "node_selector", "tolerations", "input"}  # null: "none"


def _served(dag_file: str):
    from airflow.serialization.serialized_objects import DagSerialization

    dag = runpy.run_path(str(REPO / "dags" / dag_file))["dag"]
    return DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))


SERVED = {dag_file: _served(dag_file) for dag_file in DAGS}
PARAMS = [(dag_file, name) for dag_file, dag in SERVED.items() for name in dag.params]


def _form_draws_a_required_star(schema: dict) -> bool:
    """airflow/ui's rule (X2 in the built bundle): ``!!type && (!Array.isArray(type) || !type.includes("null"))``."""
    kind = schema.get("type")
    return bool(kind) and (not isinstance(kind, list) or "null" not in kind)


@pytest.mark.parametrize(("dag_file", "name"), PARAMS)
def test_a_field_with_a_valid_default_has_no_required_star_and_says_what_it_is(dag_file, name):
    param = SERVED[dag_file].params.get_param(name)
    param.resolve(raises=True)  # the default is valid
    assert not _form_draws_a_required_star(param.schema), (dag_file, name)
    assert param.schema.get("title") and param.description, (dag_file, name)  # D8: "Rows to score" had none


@pytest.mark.parametrize(("dag_file", "name"), [(f, n) for f, n in PARAMS if n not in EMPTY_MEANS_DEFAULT])
def test_an_emptied_field_is_refused_at_trigger_naming_the_param(dag_file, name):
    """D2: an emptied number field (null) started a run, which its first task then refused."""
    with pytest.raises(ParamValidationError, match=f"Invalid input for param {name}"):
        SERVED[dag_file].params.deep_merge({name: None}).validate()


@pytest.mark.parametrize(("dag_file", "name", "value", "words"), [
    ("ml_training_pipeline.py", "workers", 0, "Workers: a whole number from 1 to 64; you entered 0"),
    ("ml_training_pipeline.py", "workers", None, "Workers: a whole number from 1 to 64; you entered nothing"),
    ("ml_training_pipeline.py", "workers", "2; rm -rf /", 'Workers: a whole number from 1 to 64; you entered "2; rm -rf /"'),
    ("ml_training_pipeline.py", "learning_rate", -1, "Learning rate: above 0 and at most 1; you entered -1"),
    ("ml_training_pipeline.py", "framework", "tensorflow",
     'Framework: one of lightgbm, xgboost, horovod, pytorch; you entered "tensorflow"'),
    ("ml_batch_scoring.py", "rows", 0, "Rows to score: a whole number from 1 to 1000000; you entered 0"),
    ("ml_quickstart.py", "epochs", 101, "Epochs: a whole number from 1 to 100; you entered 101"),
])
def test_a_refusal_is_said_in_the_params_words(dag_file, name, value, words):
    """D3: the API server answered with jsonschema's dump ("0 is less than the minimum of 1 / Failed validating
    'minimum' in schema['allOf'][0]: {...}"); these are the words the plugin's middleware answers with."""
    param = SERVED[dag_file].params.get_param(name)
    with pytest.raises(ParamValidationError):
        SERVED[dag_file].params.deep_merge({name: value}).validate()
    assert refusal_words(param.schema, param.description, value) == words


def test_a_long_entry_is_cut_short_in_the_refusal():
    param = SERVED["ml_training_pipeline.py"].params.get_param("workers")
    said = refusal_words(param.schema, param.description, "x" * 10_000)
    assert said.endswith('..."'[:-1] + "...") or said.endswith("...") and len(said) < 120
