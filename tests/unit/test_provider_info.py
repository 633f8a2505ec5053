"""Airflow discovers the provider through its entry point, and every declared class path imports."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from airflow_ml_provider.get_provider_info import get_provider_info


def test_entry_point_resolves_to_provider_info():
    (entry,) = [ep for ep in entry_points(group="apache_airflow_provider") if ep.value.startswith("airflow_ml_provider")]
    info = entry.load()()
    assert info["package-name"] == "airflow-ml-provider"


def test_declared_modules_and_classes_import():
    info = get_provider_info()
    for section in ("hooks", "operators", "sensors", "triggers"):
        modules = [m for item in info[section] for m in item["python-modules"]]
        assert modules, section
        for module in modules:
            importlib.import_module(module)
    for conn in info["connection-types"]:
        module, _, cls = conn["hook-class-name"].rpartition(".")
        hook = getattr(importlib.import_module(module), cls)
        assert hook.conn_type == conn["connection-type"]


def test_airflow_providers_manager_lists_hook_and_trigger():
    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    manager = ProvidersManager()
    assert "airflow-ml-provider" in manager.providers
    assert "ml_training" in ProvidersManagerTaskRuntime().hooks
    triggers = {t.trigger_class_name for t in manager.trigger if t.package_name == "airflow-ml-provider"}
    assert triggers == {"airflow_ml_provider.triggers.training_job", "airflow_ml_provider.triggers.elasticsearch_log"}
