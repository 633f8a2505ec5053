"""Hostile trigger-form values for the pipeline's Params (a UI user is not trusted), validated by Airflow's
own Param validation of the shipped DAG: refused naming the Param, or kept as literal data.

Issue 12, item 7: ``$`` let a trailing newline through ``data_path``/``model_name``; ``learning_rate=NaN``
was accepted.
"""

from __future__ import annotations

import copy
import runpy

import pytest
from airflow.sdk.exceptions import AirflowFailException, ParamValidationError
from support import REPO


@pytest.fixture(scope="module")
def pipeline():
    return runpy.run_path(str(REPO / "dags" / "ml_training_pipeline.py"))


# (case, Param, hostile value, what the refusal says)
REFUSED = [
    ("data_path_trailing_newline", "data_path", "/data/train.npz\n", "does not match"),
    ("data_path_parent_directory", "data_path", "/data/../../etc/train.npz", "does not match"),
    ("data_path_relative", "data_path", "train.npz", "does not match"),
    ("data_path_shell", "data_path", "/data/$(id).npz", "does not match"),
    ("model_name_trailing_newline", "model_name", "model\n", "does not match"),
    ("model_name_quote", "model_name", "m' or '1'='1", "does not match"),
    ("model_name_path", "model_name", "../models/x", "does not match"),
    ("image_shell", "image", "evil$(id)", "does not match"),
    ("image_local_path", "image", "/opt/venv", "does not match"),
    ("workers_a_billion", "workers", 10**9, "is greater than the maximum of 64"),
    ("workers_a_string", "workers", "2; rm -rf /", "is not of type 'integer'"),
    ("backend_unknown", "backend", "../../x", "is not one of"),
    ("learning_rate_infinite", "learning_rate", float("inf"), "is greater than the maximum of 1"),
    ("notes_too_long", "notes", "x" * 501, "is too long"),
]


@pytest.mark.parametrize(("param", "value", "message"), [case[1:] for case in REFUSED],
                         ids=[case[0] for case in REFUSED])
def test_hostile_param_is_refused_by_airflows_validation(pipeline, param, value, message):
    with pytest.raises(ParamValidationError) as raised:
        pipeline["dag"].params.get_param(param).resolve(value)
    assert message in str(raised.value)


@pytest.mark.parametrize(("values", "message"), [
    ({"learning_rate": float("nan")}, "learning_rate: nan is not a finite number: Step size, above 0 and at most 1."),
    ({"learning_rate": None}, "learning_rate: no number given (NaN and Infinity arrive as null through JSON)"),
    ({"min_accuracy": float("-inf")}, "min_accuracy: -inf is not a finite number: Gate: held-out accuracy."),
    ({"boost_rounds": 5.0}, "boost_rounds: 5.0 is not an integer (write 5 without a decimal point): LightGBM only"),
    ({"workers": 2.5}, "workers: 2.5 is not an integer: Workers of the training job"),
])
def test_numbers_airflow_lets_through_are_refused_by_the_first_task_naming_the_param(pipeline, values, message):
    """JSON-schema bounds let NaN through (it reaches tasks as null after JSON) and draft 2020-12 takes 5.0 as an
    integer, which the trainers' integer arguments refuse much later (issue 19 L6, L9)."""
    param = copy.copy(pipeline["dag"].params.get_param("learning_rate"))  # resolve() keeps the value it checked
    assert param.resolve(float("nan")) != param.resolve(float("nan"))  # Airflow's validation lets NaN through
    assert copy.copy(pipeline["dag"].params.get_param("boost_rounds")).resolve(5.0) == 5.0  # and 5.0 for an integer
    with pytest.raises(AirflowFailException, match=r"^Params refused: ") as raised:
        pipeline["check_params"](values)
    assert message in str(raised.value)


def test_trigger_conf_keys_that_name_no_param_are_refused_without_echoing_them_in_full(pipeline):
    """Airflow passes extra conf keys to every task unvalidated (issue 19 L6)."""
    with pytest.raises(AirflowFailException) as raised:
        pipeline["check_params"]({}, {"../../evil key": 1, "x" * 100_000: 2, "workers": 2})
    message = str(raised.value)
    assert message.startswith("Params refused: ") and "'../../evil key'" in message
    assert "'" + "x" * 40 + "...'" in message and "x" * 41 not in message
    assert "the trigger conf is 100" in message and "[ml_training] max_conf_bytes" in message
    with pytest.raises(AirflowFailException, match=r"has 65 keys, more than the 64 allowed"):
        pipeline["check_params"]({}, {name: 1 for name in [*pipeline["dag"].params, *map(str, range(65))][:65]})
    pipeline["check_params"](dict(pipeline["dag"].params), dict(pipeline["dag"].params))  # the defaults pass


@pytest.mark.parametrize("notes", ["{{ var.value.secret }}", "{% for x in range(10**9) %}x{% endfor %}",
                                   "<script>alert(1)</script>"])
def test_free_text_notes_are_rendered_once_into_literal_text(pipeline, notes):
    dag = pipeline["dag"]
    assert dag.params.get_param("notes").resolve(notes) == notes
    deploy = dag.task_dict["deploy"]
    rendered = deploy.render_template(deploy.description, {"params": {"notes": notes}}, dag.get_template_env())
    assert rendered == notes
