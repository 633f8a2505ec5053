"""Hostile trigger-form values for the pipeline's Params (a UI user is not trusted), validated by Airflow's
own Param validation of the shipped DAG: refused naming the Param, or kept as literal data.

Issue 12, item 7: ``$`` let a trailing newline through ``data_path``/``model_name``; ``learning_rate=NaN``
was accepted.
"""

from __future__ import annotations

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


def test_nan_learning_rate_is_refused_by_the_first_task_naming_the_param(pipeline):
    params = pipeline["dag"].params.get_param("learning_rate")
    assert params.resolve(float("nan")) != params.resolve(float("nan"))  # JSON schema bounds let NaN through
    with pytest.raises(AirflowFailException, match=r"^Params refused: learning_rate: nan is not a finite number"):
        pipeline["check_params"]({"learning_rate": float("nan"), "data_path": None})


@pytest.mark.parametrize("notes", ["{{ var.value.secret }}", "{% for x in range(10**9) %}x{% endfor %}",
                                   "<script>alert(1)</script>"])
def test_free_text_notes_are_rendered_once_into_literal_text(pipeline, notes):
    dag = pipeline["dag"]
    assert dag.params.get_param("notes").resolve(notes) == notes
    deploy = dag.task_dict["deploy"]
    rendered = deploy.render_template(deploy.description, {"params": {"notes": notes}}, dag.get_template_env())
    assert rendered == notes
