"""Airflow discovers the provider through its entry point, and every declared class path imports."""

from __future__ import annotations

import importlib
import re
from importlib.metadata import entry_points

import pytest

from airflow_ml_provider.get_provider_info import get_provider_info
from airflow_ml_provider.hooks.training_connection import TrainingConnection
from support import REPO


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
    assert "mltraining" in ProvidersManagerTaskRuntime().hooks
    triggers = {t.trigger_class_name for t in manager.trigger if t.package_name == "airflow-ml-provider"}
    assert {"airflow_ml_provider.triggers.training_job", "airflow_ml_provider.triggers.elasticsearch_log",
            "airflow_ml_provider.triggers.search"} <= triggers


# --- the connection forms, as the UI's API serves them ----------------------------------------------------

HOOK_MODULES = {  # where each connection's extras are read
    "mltraining": ("airflow_ml_provider/hooks/training_connection.py",),
    "mlregistry": ("airflow_ml_provider/hooks/model_registry.py",),
}


def _hook_meta() -> dict:
    """What ``GET /ui/connections/hook_meta`` sends the connection form, per connection type."""
    from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService

    return {m.connection_type: m for m in HookMetaService.hook_meta_data() if m.connection_type in HOOK_MODULES}


def test_connection_types_have_friendly_names():
    meta = _hook_meta()
    assert (meta["mltraining"].hook_name, meta["mlregistry"].hook_name) == (
        "ML Training Backend",
        "ML Model Registry",
    )


def test_connection_forms_show_only_the_fields_their_hooks_read():
    meta = _hook_meta()
    training = meta["mltraining"].standard_fields
    assert all(getattr(training, name).hidden for name in ("host", "url_schema", "port", "login", "password"))
    registry = meta["mlregistry"].standard_fields
    assert registry.url_schema.hidden and registry.port.hidden
    assert not (registry.host.hidden or registry.login.hidden or registry.password.hidden)
    assert registry.host.title == "Tracking URI" and "http://mlflow:5000" in registry.host.placeholder
    for conn_type, modules in HOOK_MODULES.items():
        declared = set(meta[conn_type].extra_fields)
        if conn_type == "mltraining":  # its extras are read once, into TrainingConnection's fields
            read = set(TrainingConnection.model_fields)
        else:
            source = "\n".join((REPO / module).read_text() for module in modules)
            read = set(re.findall(r"extras(?:\(\))?(?:\.get\(|\[)\"(\w+)\"", source))
        assert declared - read == set(), f"{conn_type}: fields the hook never reads"
        assert read - declared == set(), f"{conn_type}: extras the hook reads that the form lacks"


def test_extra_fields_are_labelled_optional_and_never_offer_a_literal_null():
    for conn_type, meta in _hook_meta().items():
        for name, field in meta.extra_fields.items():
            schema = field["schema"]
            assert schema["title"] and field["description"], (conn_type, name)
            assert "null" in schema["type"] and field["value"] is None, (conn_type, name)  # optional, unset
            assert None not in schema.get("enum", []), (conn_type, name)
            if "enum" in schema:
                assert set(schema["values_display"]) == set(schema["enum"]), (conn_type, name)


@pytest.mark.parametrize("name", ["gang_scheduler", "namespace"])
def test_kubernetes_name_fields_accept_exactly_what_the_backend_accepts_and_name_the_field(name):
    """The form's schema for these extras is the Kubernetes backends' own check (a DNS-1123 label)."""
    from jsonschema import Draft202012Validator

    from airflow_ml_provider.jobs.backends.kubernetes.rest import dns_label

    fields = _hook_meta()["mltraining"].extra_fields
    form = Draft202012Validator({"type": "object", "properties": {n: f["schema"] for n, f in fields.items()}})
    assert form.is_valid({"backend": "mpijob", name: None})  # unset: the documented default
    for value in ("volcano", "scheduler-plugins", "a" * 63, "a" * 64, "Volcano", "../x", "-volcano", "volcano-",
                  "vol_cano", "volcano.x", "volcano\n", "vol cano"):
        try:
            accepted = dns_label(name, value) == value
        except ValueError as exc:
            accepted = False
            assert str(exc).startswith(f"{name}: {value!r} is not a DNS-1123 label")
        errors = list(form.iter_errors({"backend": "mpijob", name: value}))
        assert (not errors) is accepted, (value, errors)
        assert all(list(error.path) == [name] for error in errors), "the refusal names the field"
    assert fields[name]["schema"]["maxLength"] == 63  # what the browser's input enforces as you type


def test_secrets_are_masked():
    from airflow.providers_manager import ProvidersManager

    widgets = ProvidersManager().connection_form_widgets
    assert _hook_meta()["mlregistry"].extra_fields["token"]["schema"]["format"] == "password"
    assert widgets["extra__mlregistry__token"].is_sensitive
    assert not widgets["extra__mlregistry__ui_url"].is_sensitive


def test_the_providers_page_links_to_real_documentation():
    from airflow.providers_manager import ProvidersManager

    from airflow_ml_provider.get_provider_info import DOCS_URL

    assert ProvidersManager().providers["airflow-ml-provider"].data["documentation-url"] == DOCS_URL
    assert DOCS_URL.startswith("https://github.com/airflow-ml/airflow-ml-provider")
