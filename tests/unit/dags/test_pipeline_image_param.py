"""The pipeline's ``image`` Param: a registry reference on the Kubernetes backends; on the local backend
(where an image is a Python environment to execute from) the absolute path of one of the deployment's
environments, never a relative path nor an arbitrary program. The trigger form checks only the length;
the first task, ``prepare_data``, checks the rest against the backend the run uses (issue 19 L5)."""

from __future__ import annotations

import copy
import runpy

import pytest
from airflow.sdk.exceptions import AirflowFailException, ParamValidationError

from support import REPO


@pytest.fixture(scope="module")
def pipeline():
    return runpy.run_path(str(REPO / "dags" / "ml_training_pipeline.py"))


def _validated(params, image):
    chosen = copy.deepcopy(params)
    chosen.update({"image": image})
    return chosen.validate()["image"]


@pytest.mark.parametrize("image", [None, "train", "registry.example/ml/train:2.21-gpu",
                                   "registry.example:5000/train@sha256:" + "a" * 64])
@pytest.mark.parametrize("backend", ["mpijob", "volcano", "indexed-job"])
def test_image_references_are_accepted_on_kubernetes(pipeline, image, backend):
    assert _validated(pipeline["dag"].params, image) == image
    assert pipeline["check_params"]({"backend": backend, "image": image}) is None


def test_an_image_longer_than_512_characters_is_refused_by_the_form(pipeline):
    with pytest.raises(ParamValidationError, match="Invalid input for param image"):
        _validated(pipeline["dag"].params, "x" * 600)


@pytest.mark.parametrize("image", ["/usr", "../venv", "train; rm -rf /", "train:$(id)", "Train:1", "train:1\n",
                                   "{{ 7 * 7 }}"])
def test_paths_and_shell_syntax_are_refused_on_kubernetes_naming_the_param(pipeline, image):
    with pytest.raises(AirflowFailException, match=r"^Params refused: image: .* is not a registry reference"):
        pipeline["check_params"]({"backend": "mpijob", "image": image})


@pytest.mark.parametrize(("image", "message"), [
    ("train", "is not an absolute path"),
    ("../venv", "is not an absolute path"),
    ("/usr", "is not one of the local environments this deployment allows"),
    ("/tmp/anyone-could-write-this", "is not one of the local environments this deployment allows"),
])
def test_the_local_backend_takes_only_the_deployments_environments(pipeline, monkeypatch, tmp_path, image, message):
    monkeypatch.setenv("AIRFLOW__ML_TRAINING__LOCAL_IMAGES", str(tmp_path / "venvs" / "train"))
    with pytest.raises(AirflowFailException, match=r"^Params refused: image: ") as raised:
        pipeline["check_params"]({"backend": "local", "image": image})
    assert message in str(raised.value)
    assert pipeline["check_params"]({"backend": "local", "image": str(tmp_path / "venvs" / "train")}) is None
    assert pipeline["check_params"]({"backend": None, "image": str(tmp_path / "venvs/../venvs/train")}) is None
