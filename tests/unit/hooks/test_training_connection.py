"""The training connection's extras are read once into a typed object (hooks.training_connection): a value of
the wrong kind is refused naming its key, a blank one is unset, an unknown key is ignored with a warning
naming it, and every reader of the connection takes its values from that object."""

from __future__ import annotations

import json

import pytest

from airflow_ml_provider.get_provider_info import get_provider_info
from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.hooks.training_connection import TrainingConnection


@pytest.mark.parametrize(("extra", "key"), [
    ({"orphan_grace_s": "soon"}, "extra.orphan_grace_s"),
    ({"orphan_grace_s": -5}, "extra.orphan_grace_s"),
    ({"local_sandbox": "sometimes"}, "extra.local_sandbox"),
    ({"queueing": "yunikorn"}, "extra.queueing"),
    ({"training_runtime_kind": "Runtime"}, "extra.training_runtime_kind"),
    ({"artifact_secret_env": {"AWS_ACCESS_KEY_ID": "plain-text"}}, "extra.artifact_secret_env.AWS_ACCESS_KEY_ID"),
    ({"artifact_secret_env": {"X": {"secret": "s3"}}}, "extra.artifact_secret_env.X.key"),
    ({"image": ["a", "b"]}, "extra.image"),
])
def test_a_value_of_the_wrong_kind_is_refused_naming_its_key(monkeypatch, extra, key):
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_TYPED", json.dumps({"conn_type": "mltraining", "extra": extra}))
    with pytest.raises(ValueError, match=rf"^connection 'ml_training_typed': {key}: "):
        TrainingBackendHook("ml_training_typed").job_setup("local")


def test_blank_values_are_unset_and_an_unknown_key_is_ignored_with_a_warning(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_TYPED", json.dumps({"conn_type": "mltraining", "extra": {
        "backnd": "mpijob", "backend": "", "local_root": str(tmp_path), "orphan_grace_s": "", "data_roots": "/a, /b,"}}))
    hook = TrainingBackendHook("ml_training_typed")
    with pytest.warns(UserWarning, match=r"ignoring extra backnd: not a setting of the training connection"):
        setup = hook.job_setup()
    assert setup.backend.name == "local" and str(setup.backend.root) == str(tmp_path)
    assert hook.data_roots() == ["/a", "/b"]


def test_one_object_answers_every_reader():
    settings = TrainingConnection.parse("c", {"image": "reg/train:1", "image_pytorch": "reg/torch:1",
                                              "artifact_secret_env": {"AWS_ACCESS_KEY_ID": {"secret": "s3", "key": "id"}},
                                              "elasticsearch_conn_id": "es"})
    assert settings.images() == {"image": "reg/train:1", "image_pytorch": "reg/torch:1"}
    assert settings.artifact_secret_env["AWS_ACCESS_KEY_ID"].secret == "s3" and settings.elasticsearch_conn_id == "es"


def test_the_model_reads_exactly_the_extras_the_connection_form_declares():
    [training] = [c for c in get_provider_info()["connection-types"] if c["connection-type"] == "mltraining"]
    assert set(training["conn-fields"]) == set(TrainingConnection.model_fields)
