"""get_provider_info declares everything the package offers: every public operator, sensor, trigger, hook,
extra link, notifier and connection type (found by importing every module), and the [ml_training]
config section, which the real `airflow config list` shows."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import airflow_ml_provider
from airflow_ml_provider.get_provider_info import get_provider_info
from airflow_ml_provider.recipes.budgets import Budgets
from support import REPO


def _public_classes() -> dict[str, list[type]]:
    """Public classes (no leading underscore) defined in the package, by the provider-info section that
    must declare them; every module must import."""
    from airflow.sdk import BaseHook, BaseNotifier, BaseOperator, BaseOperatorLink, BaseSensorOperator
    from airflow.triggers.base import BaseTrigger

    kinds = [("sensors", BaseSensorOperator), ("operators", BaseOperator), ("triggers", BaseTrigger),
             ("hooks", BaseHook), ("extra-links", BaseOperatorLink), ("notifications", BaseNotifier)]
    found: dict[str, list[type]] = {kind: [] for kind, _ in kinds}
    for module_info in pkgutil.walk_packages(airflow_ml_provider.__path__, "airflow_ml_provider."):
        module = importlib.import_module(module_info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and obj.__module__ == module.__name__ and not name.startswith("_"):
                kind = next((kind for kind, base in kinds if issubclass(obj, base)), None)
                if kind:
                    found[kind].append(obj)
    return found


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def test_every_public_class_is_declared():
    info = get_provider_info()
    found = _public_classes()
    assert found["operators"] and found["sensors"] and found["triggers"] and found["hooks"]
    missing = []
    for section in ("operators", "sensors", "triggers", "hooks"):
        modules = {module for item in info[section] for module in item["python-modules"]}
        missing += [f"{section}: {_path(cls)}" for cls in found[section] if cls.__module__ not in modules]
    for section in ("extra-links", "notifications"):
        missing += [f"{section}: {_path(cls)}" for cls in found[section] if _path(cls) not in info.get(section, [])]
    assert missing == []


def test_every_connection_type_of_a_hook_is_declared_here_or_by_its_provider():
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    ours = {conn["connection-type"]: conn["hook-class-name"] for conn in get_provider_info()["connection-types"]}
    hooks = ProvidersManagerTaskRuntime().hooks
    for hook in _public_classes()["hooks"]:
        conn_type = hook.__dict__.get("conn_type")
        if conn_type in ours:
            assert ours[conn_type] == _path(hook)
        else:  # a connection type another provider owns (Elasticsearch), which must be installed
            assert conn_type in hooks and hooks[conn_type].package_name != "airflow-ml-provider", _path(hook)
    assert set(ours) == {"mltraining", "mlregistry"}


def test_provider_info_matches_airflows_schema():
    import airflow
    import jsonschema

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def test_every_ml_training_option_the_code_reads_is_declared():
    source = "\n".join(p.read_text() for p in (REPO / "airflow_ml_provider").rglob("*.py"))
    read = set(re.findall(r"conf\.get\w*\(\s*\"ml_training\",\s*\"(\w+)\"", source))
    read |= set(re.findall(r"^\s+option = \"(\w+)\"", source, re.MULTILINE))  # the extra links' templates
    read |= {Budgets.option(field.name) for field in dataclasses.fields(Budgets)}  # Budgets.from_config reads these
    declared = set(get_provider_info()["config"]["ml_training"]["options"])
    assert read and read <= declared, read - declared
    assert declared <= read, f"declared but never read: {declared - read}"


def test_airflow_config_list_shows_the_section_with_descriptions_defaults_and_examples(tmp_path):
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path)}
    env = {k: v for k, v in env.items() if not k.startswith("AIRFLOW__ML_TRAINING__")}
    listed = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "config", "list", "--section", "ml_training",
         "--include-descriptions", "--include-examples", "--show-values"],
        env=env, capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr
    text = " ".join(listed.stdout.split())  # descriptions are wrapped
    assert "[ml_training]" in text
    for name, option in get_provider_info()["config"]["ml_training"]["options"].items():
        assert " ".join(option["description"].split()) in text, name
        assert f"# Example: {name} = {option['example']}" in text, name
        shown = f"{name} = {option['default']}" if option["default"] else f"# {name} ="
        assert shown in text, name


@pytest.mark.parametrize("option", ["mlflow_ui_url"])
def test_declared_default_is_what_the_code_falls_back_to(option):
    """The declared default and the code's fallback are one value: Airflow serves the declared one."""
    from airflow.configuration import conf

    conf.load_providers_configuration()
    declared = get_provider_info()["config"]["ml_training"]["options"][option]["default"] or ""
    source = (REPO / "airflow_ml_provider" / "hooks" / "model_registry.py").read_text()
    assert f'conf.get("ml_training", "{option}", fallback="{declared}")' in source
    assert conf.get("ml_training", option, fallback="") == declared


def _code_defaults() -> dict[str, object]:
    """What the code falls back to when an option is not set (None: a value computed at run time)."""
    from airflow_ml_provider.operators.params import MAX_CONF_BYTES, MAX_CONF_KEYS
    from airflow_ml_provider.operators.task_log import TASK_LOG_LINES
    from airflow_ml_provider.search.space import MAX_PARALLEL, MAX_TRIALS

    budgets = {Budgets.option(field.name): field.default for field in dataclasses.fields(Budgets)}
    return {**budgets, "max_conf_keys": MAX_CONF_KEYS, "max_conf_bytes": MAX_CONF_BYTES,
            "search_max_parallel": MAX_PARALLEL, "search_max_trials": MAX_TRIALS, "local_max_workers": None,
            "task_log_max_lines": TASK_LOG_LINES,
            "data_roots": None, "local_images": None, "recipe_cache_dir": None}


@pytest.mark.parametrize("option", sorted(_code_defaults()))
def test_declared_bounds_are_the_codes_own_defaults_and_types(option):
    """Airflow serves the declared default, so it must be the value the code uses when nothing is configured."""
    declared = get_provider_info()["config"]["ml_training"]["options"][option]
    default = _code_defaults()[option]
    if default is None:
        assert declared["default"] is None, option
        assert "Unset:" in declared["description"], "an unset option says what applies instead"
        return
    kind = {int: "integer", float: "float"}[type(default)]
    assert declared["type"] == kind
    assert {"integer": int, "float": float}[kind](declared["default"]) == default
    assert {"integer": int, "float": float}[kind](declared["example"]) > 0
