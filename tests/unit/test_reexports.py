"""The top-level hooks/, operators/, sensors/ folders re-export the package's own objects."""

from __future__ import annotations

import importlib
import sys

import pytest
from support import REPO


@pytest.mark.parametrize(
    ("module", "package_module"),
    [
        ("hooks.ml_training", "airflow_ml_provider.hooks.training_backend"),
        ("operators.ml_training", "airflow_ml_provider.operators.training"),
        ("sensors.ml_training", "airflow_ml_provider.sensors.training_job"),
    ],
)
def test_each_reexported_name_is_the_package_object(module, package_module, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))
    for name in [m for m in sys.modules if m.split(".")[0] in ("hooks", "operators", "sensors")]:
        monkeypatch.delitem(sys.modules, name)
    reexport, source = importlib.import_module(module), importlib.import_module(package_module)
    assert reexport.__all__, f"{module} exports nothing"
    for name in reexport.__all__:
        assert getattr(reexport, name) is getattr(source, name), f"{module}.{name} is a copy"
