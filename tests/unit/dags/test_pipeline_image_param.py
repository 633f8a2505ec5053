"""The pipeline's ``image`` Param: a container image reference or nothing (the connection's image);
never a local path (on the local backend an image is a Python environment to execute from)."""

from __future__ import annotations

import copy
import runpy

import pytest
from airflow.sdk.exceptions import ParamValidationError
from support import REPO


@pytest.fixture(scope="module")
def params():
    return runpy.run_path(str(REPO / "dags" / "ml_training_pipeline.py"))["dag"].params


def _validated(params, image):
    chosen = copy.deepcopy(params)
    chosen.update({"image": image})
    return chosen.validate()["image"]


@pytest.mark.parametrize("image", [None, "train", "registry.example/ml/train:2.21-gpu",
                                   "registry.example:5000/train@sha256:" + "a" * 64])
def test_image_references_are_accepted(params, image):
    assert _validated(params, image) == image


@pytest.mark.parametrize("image", ["/usr", "/opt/venv", "../venv", "train; rm -rf /", "train:$(id)",
                                   "Train:1", "train:1\n", "{{ 7 * 7 }}", "x" * 600])
def test_paths_and_shell_syntax_are_refused_naming_the_param(params, image):
    with pytest.raises(ParamValidationError, match="Invalid input for param image"):
        _validated(params, image)
