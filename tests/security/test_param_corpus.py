"""Hostile trigger-form values for the pipeline's Params (a UI user is not trusted), validated by Airflow's
own Param validation of the shipped DAG: refused naming the Param, or kept as literal data.

Issue 12, item 7: ``$`` let a trailing newline through ``data_path``/``model_name``; ``learning_rate=NaN``
was accepted. Issue 19: ``data_path`` read any file the worker could read and echoed its first line (L1);
a relative ``image`` reached the local backend (L5). Paths and images are now checked by the first task,
``prepare_data`` (``check_params``), against the configured data roots and the backend.
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
    ("model_name_trailing_newline", "model_name", "model\n", "does not match"),
    ("model_name_quote", "model_name", "m' or '1'='1", "does not match"),
    ("model_name_path", "model_name", "../models/x", "does not match"),
    ("workers_a_billion", "workers", 10**9, "is greater than the maximum of 64"),
    ("workers_a_string", "workers", "2; rm -rf /", "is not of type 'null', 'integer'"),
    ("backend_unknown", "backend", "../../x", "is not one of"),
    ("learning_rate_infinite", "learning_rate", float("inf"), "is greater than the maximum of 1"),
    ("notes_too_long", "notes", "x" * 501, "is too long"),
    ("data_path_too_long", "data_path", "/" + "x" * 4096, "is too long"),
    ("image_too_long", "image", "x" * 513, "is too long"),
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
    ({"boost_rounds": 5.0}, "boost_rounds: 5.0 is not an integer (write 5 without a decimal point): LightGBM and XGBoost only"),
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


FAKE_SECRET = "ghp_FAKE_TOKEN_0123456789abcdef,prod-db-password-hunter2"


@pytest.fixture
def data_roots(tmp_path, monkeypatch):
    """A data root (``[ml_training] data_roots``) and, beside it, a folder outside it holding a secret."""
    root, outside = tmp_path / "data", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.csv").write_text(FAKE_SECRET + ",label\n1,2,0\n")
    (root / "link.csv").symlink_to(outside / "secret.csv")
    (root / "secret-header.csv").write_text(FAKE_SECRET + "\n1,2\n")
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__DATA_ROOTS", str(root))
    return root, outside


# (case, Params, what the first task's refusal says)
FIRST_TASK_REFUSED = [
    ("data_path_trailing_newline", {"data_path": "{root}/train.npz\n"}, "is not an absolute path of an .npz or"),
    ("data_path_relative", {"data_path": "train.npz"}, "data_path: 'train.npz' is not an absolute path of an"),
    ("data_path_other_format", {"data_path": "{root}/train.parquet"}, "is not an absolute path of an .npz or"),
    ("data_path_outside_the_roots", {"data_path": "{outside}/secret.csv"}, "is outside the data roots"),
    ("data_path_parent_directory", {"data_path": "{root}/../outside/secret.csv"}, "is outside the data roots"),
    ("data_path_symlink_out_of_the_root", {"data_path": "{root}/link.csv"}, "is outside the data roots"),
    ("data_path_outside_and_missing", {"data_path": "/etc/nothing-here.csv"}, "is outside the data roots"),
    ("data_path_shell", {"data_path": "{root}/$(id).npz"}, "is not a file the Airflow worker can read"),
    ("image_relative_on_local", {"image": "venv"}, "image: 'venv' is not an absolute path; the local backend"),
    ("image_dot_relative_on_local", {"image": "./venvs/train"}, "image: './venvs/train' is not an absolute path"),
    ("image_path_on_kubernetes", {"image": "/opt/venv", "backend": "mpijob"}, "is not a registry reference"),
    ("image_shell_on_kubernetes", {"image": "evil$(id)", "backend": "volcano"}, "is not a registry reference"),
]


@pytest.mark.parametrize(("params", "message"), [case[1:] for case in FIRST_TASK_REFUSED],
                         ids=[case[0] for case in FIRST_TASK_REFUSED])
def test_paths_and_images_are_refused_by_the_first_task_naming_the_param(pipeline, data_roots, params, message):
    root, outside = data_roots
    values = {"backend": None, **{k: v.format(root=root, outside=outside) for k, v in params.items()}}
    with pytest.raises(AirflowFailException, match=r"^Params refused: ") as raised:
        pipeline["check_params"](values)
    assert message in str(raised.value)
    assert "ghp_FAKE" not in str(raised.value) and "hunter2" not in str(raised.value)


def test_a_refused_image_or_path_is_described_in_the_params_own_words(pipeline, data_roots):
    dag = pipeline["dag"]
    with pytest.raises(AirflowFailException) as raised:
        pipeline["check_params"]({"backend": None, "image": "venv", "data_path": "train.npz"})
    assert dag.params.get_param("image").description in str(raised.value)
    assert dag.params.get_param("data_path").description in str(raised.value)


def test_a_csv_inside_a_root_is_read_but_its_content_never_echoed(pipeline, data_roots):
    """The refusal of a CSV without a label column used to print its header: the token itself."""
    from airflow_ml_provider.runtime.datasets import load_npz_or_csv

    root, _ = data_roots
    source = pipeline["check_params"]({"backend": None, "data_path": str(root / "secret-header.csv")})
    with pytest.raises(ValueError, match="no 'label' column in its header line") as raised:
        load_npz_or_csv(source)
    assert "ghp_FAKE" not in str(raised.value) and "hunter2" not in str(raised.value)
    (root / "bad-rows.csv").write_text("a,label\n" + FAKE_SECRET + "\n")
    with pytest.raises(ValueError, match="not all numbers") as raised:
        load_npz_or_csv(pipeline["check_params"]({"backend": None, "data_path": str(root / "bad-rows.csv")}))
    assert "ghp_FAKE" not in str(raised.value) and "hunter2" not in str(raised.value)


def test_paths_with_spaces_or_non_ascii_letters_inside_a_root_are_accepted(pipeline, data_roots):
    """Issue 25 D5: the trigger form refused them with a regex; they are plain file names."""
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_ml_provider.runtime.datasets import load_npz_or_csv

    root, _ = data_roots
    folder = root / "my data" / "Ünïcødé 数据"
    folder.mkdir(parents=True)
    (folder / "été 2026.csv").write_text("a,b,label\n1,2,0\n3,4,1\n")
    path = str(folder / "été 2026.csv")
    served = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(pipeline["dag"]))
    assert served.params.deep_merge({"data_path": path}).validate()["data_path"] == path  # trigger time
    source = pipeline["check_params"]({"backend": None, "data_path": path})  # the first task
    assert source == path
    X, y = load_npz_or_csv(source)
    assert X.shape == (2, 2) and list(y) == [0, 1]


@pytest.mark.parametrize(("image", "backend"), [("/opt/venvs/train", None), ("/opt/venvs/train", "local"),
                                                ("registry.example.com:5000/team/train:1.2", "mpijob"),
                                                ("ubuntu", "indexed-job")])
def test_an_allowed_environment_or_a_registry_reference_is_accepted(pipeline, monkeypatch, image, backend):
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__LOCAL_IMAGES", "/opt/venvs/train")
    assert pipeline["check_params"]({"backend": backend, "image": image}) is None


def test_the_local_backend_refuses_a_relative_image_at_submit(tmp_path):
    """Whatever the DAG: a relative image would be resolved against the submitting process's directory."""
    from airflow_ml_provider.jobs.backends.base import JobSubmissionError
    from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
    from airflow_ml_provider.jobs.spec import TrainingJobSpec

    spec = TrainingJobSpec(framework="generic", command=["python", "-c", "pass"], num_workers=1, image="venv")
    backend = LocalBackend(tmp_path)
    with pytest.raises(JobSubmissionError, match="image: 'venv' is not an absolute path"):
        backend.submit("aml-relative-image", spec, {})
    assert not backend.job_dir("aml-relative-image").exists()  # refused before anything was written
