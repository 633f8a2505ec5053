"""The pipeline's Params: defaults validate; wrong or hostile values are refused with a message,
both by Airflow's trigger-time validation and by the JSON schema the trigger form uses."""

from __future__ import annotations

import runpy

import jsonschema
import pytest
from airflow.sdk.exceptions import ParamValidationError
from support import REPO


@pytest.fixture(scope="module")
def dag():
    """The DAG as the API server holds it: triggering validates the run's conf against these Params."""
    from airflow.serialization.serialized_objects import DagSerialization

    dag = runpy.run_path(str(REPO / "dags" / "ml_training_pipeline.py"))["dag"]
    return DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))


def test_defaults_are_valid(dag):
    values = dag.params.deep_merge({}).validate()
    assert values["framework"] == "lightgbm" and values["workers"] == 2 and values["data_path"] == ""


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("framework", "pytorch"),
        ("backend", "local; rm -rf /"),
        ("workers", 0),
        ("workers", "2; rm -rf /"),
        ("epochs", 1.5),
        ("learning_rate", 0),
        ("learning_rate", "$(id)"),
        ("data_path", "relative/data.npz"),
        ("data_path", "/data/../etc/passwd.npz"),
        ("data_path", "/data/x.npz; rm -rf /"),
        ("data_path", "/data/$(touch x).npz"),
        ("data_path", "/data/`id`.npz"),
        ("data_path", "/data/{{ 7 * 7 }}.npz"),
        ("data_path", "/data/train.parquet"),
        ("shards", 0),
        ("model_name", "model`id`"),
        ("model_name", "{{ conf }}"),
        ("gate_metric", "speed"),
        ("min_improvement", -0.1),
        ("min_accuracy", 1.5),
        ("notes", "x" * 501),
    ],
)
def test_a_wrong_value_is_refused_naming_the_param(dag, name, value):
    params = dag.params.deep_merge({name: value})
    with pytest.raises(ParamValidationError, match=f"Invalid input for param {name}"):
        params.validate()
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(value, _trigger_form_schema(dag, name))


def test_free_text_is_accepted_as_data(dag):
    notes = "; rm -rf / $(id) `id` {{ 7 * 7 }}"
    assert dag.params.deep_merge({"notes": notes}).validate()["notes"] == notes


def _trigger_form_schema(dag, name: str) -> dict:
    """The schema the UI's trigger form validates against."""
    return dag.params.get_param(name).schema
