"""The pipeline's Params: the defaults trigger as they are; wrong or hostile values are refused with the
Param's name, both by Airflow's trigger-time validation and by the JSON schema the trigger form uses;
what a schema cannot check (NaN, a missing file) is refused by the first task."""

from __future__ import annotations

import json
import math
import runpy
import subprocess
from pathlib import Path

import jsonschema
import pytest
from airflow.sdk.exceptions import AirflowFailException, ParamValidationError

from support import REPO

PIPELINE = runpy.run_path(str(REPO / "dags" / "ml_training_pipeline.py"))
OPTIONAL = ("backend", "data_path", "notes")


@pytest.fixture(scope="module")
def dag():
    """The DAG as the API server holds it: triggering validates the run's conf against these Params."""
    from airflow.serialization.serialized_objects import DagSerialization

    return DagSerialization.deserialize_dag(DagSerialization.serialize_dag(PIPELINE["dag"]))


def test_defaults_are_valid_and_the_optional_params_are_empty(dag):
    values = dag.params.deep_merge({}).validate()
    assert values["framework"] == "lightgbm" and values["workers"] == 2
    assert [values[name] for name in OPTIONAL] == [None, None, None]


def test_every_param_has_a_title_and_a_description_and_optional_ones_allow_null(dag):
    for name, param in PIPELINE["dag"].params.items():
        assert param.schema.get("title") and param.description, name
        if name in OPTIONAL:  # the form's "required" rule: a type list holding "null"
            assert "null" in param.schema["type"], name


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("framework", "tensorflow"),
        ("backend", "local; rm -rf /"),
        ("backend", ""),
        ("workers", 0),
        ("workers", 65),
        ("workers", "2; rm -rf /"),
        ("epochs", 1.5),
        ("learning_rate", 0),
        ("learning_rate", -1),
        ("learning_rate", math.inf),
        ("learning_rate", "$(id)"),
        ("data_path", "x" * 4097),
        ("shards", 0),
        ("model_name", "model`id`"),
        ("model_name", "{{ conf }}"),
        ("model_name", "model\n"),
        ("model_name", ""),
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


PATTERN_CASES = {
    "model_name": ["m", "my_model-1.2", "model\n", "-m", "a" * 100, "a" * 101, "m\nn"],
}


def test_patterns_mean_the_same_in_the_browser_and_on_the_server(dag):
    """The form evaluates ``pattern`` as an ECMAScript regex, the server with Python's ``re.search``
    (where ``$`` also matches before a final newline): both must accept and refuse the same values."""
    node = _node()
    for name, values in PATTERN_CASES.items():
        pattern = dag.params.get_param(name).schema["allOf"][0]["pattern"]
        script = "const [p, v] = JSON.parse(process.argv[1]); console.log(JSON.stringify(v.map(s => new RegExp(p, 'u').test(s))))"
        ecmascript = json.loads(
            subprocess.run(
                [node, "-e", script, json.dumps([pattern, values])], capture_output=True, text=True, check=True
            ).stdout
        )
        python = [_accepted(dag, name, value) for value in values]
        assert ecmascript == python, (name, values)


def test_check_params_refuses_what_the_schema_cannot_naming_each_param(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__DATA_ROOTS", str(tmp_path))
    check = PIPELINE["check_params"]
    data = tmp_path / "train.npz"
    data.write_bytes(b"")
    assert check({"learning_rate": 0.1, "data_path": None}) is None
    assert check({"learning_rate": 0.1, "data_path": str(data)}) == str(data)
    with pytest.raises(AirflowFailException) as refused:
        check({"learning_rate": math.nan, "data_path": str(tmp_path / "missing.npz")})
    message = str(refused.value)
    assert "learning_rate: nan is not a finite number" in message
    assert f"data_path: '{tmp_path / 'missing.npz'}' is not a file the Airflow worker can read" in message


def test_nan_passes_the_json_schema_so_the_first_task_must_refuse_it(dag):
    assert math.isnan(dag.params.deep_merge({"learning_rate": math.nan}).validate()["learning_rate"])


def test_preprocessing_is_one_unmapped_sharded_task_whose_parts_are_the_first_tasks_output():
    """Every part of the data is one shard of ONE job (issue 43), not one mapped task per part: 10,000 parts would
    be 10,000 task instances (and [core] max_map_length is 1,024)."""
    from airflow.sdk import XComArg

    from airflow_ml_provider.operators.preprocess import PreprocessOperator

    dag = PIPELINE["dag"]
    task = dag.get_task("preprocess")
    assert isinstance(task, PreprocessOperator) and not getattr(task, "is_mapped", False)
    assert task.every_part and isinstance(task.inputs, XComArg)
    assert task.inputs.operator.task_id == "prepare_data" and task.workers == "{{ params.workers }}"
    assert [outlet.name for outlet in task.outlets] == ["ml_training_pipeline.data"]
    trained = {t.task_id: t for t in dag.tasks if t.task_id.startswith("train_")}
    assert trained["train_lightgbm"].train_data.key == trained["train_xgboost"].train_data.key == "train"


def test_the_dag_has_a_description_and_docs():
    dag = PIPELINE["dag"]
    assert dag.description and "**Trigger it**" in dag.doc_md
    assert all(task.doc_md for task in dag.tasks), [t.task_id for t in dag.tasks if not t.doc_md]


def _accepted(dag, name: str, value: str) -> bool:
    try:
        dag.params.deep_merge({name: value}).validate()
    except ParamValidationError:
        return False
    return True


def _node() -> str:
    """Node.js, for ECMAScript semantics: the one bundled with playwright (the browser tests' driver)."""
    import playwright

    node = Path(playwright.__file__).parent / "driver" / "node"
    if not node.exists():
        pytest.skip(f"no Node.js at {node} (playwright's driver)")
    return str(node)


def _trigger_form_schema(dag, name: str) -> dict:
    """The schema the UI's trigger form validates against."""
    return dag.params.get_param(name).schema


@pytest.mark.parametrize(("dag_file", "words"), [
    ("ml_training_pipeline.py", "Model name: ml_training_pipeline[.<variant>]"),
    ("ml_batch_scoring.py", "Model name: up to 100 of A-Z a-z 0-9 _ . -"),
])
def test_a_refused_model_name_is_explained_in_the_params_own_words(dag_file, words):
    """Issue 25 D5: a pattern refusal showed the raw regex only; the server's refusal (what the trigger form
    shows) now quotes the Param's words beside it, as the DAG serialized for the API server has them."""
    from airflow.serialization.serialized_objects import DagSerialization

    served = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(runpy.run_path(str(REPO / "dags" / dag_file))["dag"]))
    for value in ("; rm -rf /", "my model", "../models/x"):
        with pytest.raises(ParamValidationError) as refused:
            served.params.deep_merge({"model_name": value}).validate()
        assert "Invalid input for param model_name" in str(refused.value) and words in str(refused.value)


def test_words_too_long_to_be_quoted_whole_in_a_refusal_are_refused_when_the_dag_is_written():
    from airflow_ml_provider.patterns import bounded

    with pytest.raises(ValueError, match="would be split in a refusal"):
        bounded("Workers: a whole number from one to sixty-four, the job's process count.", minimum=1)


def test_spot_placement_params_become_the_training_jobs_kubernetes_options(dag):
    placement = PIPELINE["placement"]
    values = dag.params.deep_merge({
        "node_selector": {"cloud.google.com/gke-spot": "true"},
        "tolerations": [{"key": "cloud.google.com/gke-spot", "operator": "Exists", "effect": "NoSchedule"}]}).validate()
    assert placement(values, dag.params) == ({
        "node_selector": {"cloud.google.com/gke-spot": "true"},
        "tolerations": [{"key": "cloud.google.com/gke-spot", "operator": "Exists", "effect": "NoSchedule"}]}, [])
    assert placement(dag.params.deep_merge({}).validate(), dag.params) == ({}, [])


@pytest.mark.parametrize(("chosen", "refusal"), [
    ({"node_selector": {"bad key!": "x"}}, "node_selector['bad key!']: 'bad key!' is not a Kubernetes label key"),
    ({"node_selector": {"pool": "a b"}}, "node_selector['pool']: 'a b' is not a Kubernetes label value"),
    ({"node_selector": {"pool": "$(id)"}}, "node_selector['pool']: '$(id)' is not a Kubernetes label value"),
    ({"tolerations": [{"key": "k", "operator": "Matches"}]}, "tolerations[0]['operator']: Input should be 'Exists' or 'Equal'"),
    ({"tolerations": [{"key": "k", "effect": "NoRun"}]}, "tolerations[0]['effect']: Input should be 'NoSchedule'"),
    ({"tolerations": [{"key": "k/../x", "operator": "Exists"}]}, "tolerations[0]['key']: 'k/../x' is not a Kubernetes label key"),
    ({"tolerations": [{"operator": "Equal", "value": "v"}]},
     "tolerations[0]: operator: a toleration without a key must use 'Exists'"),
    ({"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "toleration_seconds": 5}]},
     "tolerations[0]: toleration_seconds: only for effect 'NoExecute'"),
    ({"tolerations": [{"key": "k", "command": ["sh"]}]}, "tolerations[0]['command']: Extra inputs are not permitted"),
])
def test_spot_placement_params_kubernetes_would_refuse_are_refused_naming_the_field(chosen, refusal, tmp_path,
                                                                                    monkeypatch):
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__DATA_ROOTS", str(tmp_path))
    with pytest.raises(AirflowFailException, match="^Params refused: ") as refused:
        PIPELINE["check_params"]({"learning_rate": 0.1, "data_path": None, **chosen})
    assert refusal in str(refused.value)
