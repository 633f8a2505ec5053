"""The tests that run containers of the built training image (``make image``)."""

from __future__ import annotations

import pytest
from training_image import built_image


@pytest.fixture(scope="session")
def training_image() -> str:
    """The image's name (tests/training_image.py ``built_image``: skips without podman, fails if not built)."""
    return built_image()
