"""The top-level hooks/, operators/, sensors/ folders re-export the package's own objects."""

from __future__ import annotations

import importlib
import sys

import pytest

from support import REPO


@pytest.mark.parametrize(
    ("module", "package_module"),
    [
        ("hooks.ml_training", "airflow_ml_provider.hooks.training_backend airflow_ml_provider.hooks.elasticsearch_logs"
                              " airflow_ml_provider.hooks.model_registry"),
        ("operators.ml_training", "airflow_ml_provider.operators.training airflow_ml_provider.operators.search"
                                  " airflow_ml_provider.operators.preprocess airflow_ml_provider.operators.evaluate"
                                  " airflow_ml_provider.operators.gate airflow_ml_provider.operators.deploy"
                                  " airflow_ml_provider.operators.recipe airflow_ml_provider.operators.scoring"
                                  " airflow_ml_provider.operators.parameter_server"),
        ("sensors.ml_training", "airflow_ml_provider.sensors.training_job airflow_ml_provider.sensors.elasticsearch_log"),
    ],
)
def test_each_reexported_name_is_the_package_object(module, package_module, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))
    for name in [m for m in sys.modules if m.split(".")[0] in ("hooks", "operators", "sensors")]:
        monkeypatch.delitem(sys.modules, name)
    reexport = importlib.import_module(module)
    sources = [importlib.import_module(package) for package in package_module.split()]
    assert reexport.__all__, f"{module} exports nothing"
    for name in reexport.__all__:
        source = next((source for source in sources if hasattr(source, name)), None)
        assert source is not None, f"{module}.{name} is in none of {package_module}"
        assert getattr(reexport, name) is getattr(source, name), f"{module}.{name} is a copy"
