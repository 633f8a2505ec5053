"""Every public operator keeps a small, documented surface: at most 15 parameters (its own and those it
inherits from this package's classes; BaseOperator's are Airflow's), each named in its docstring's Args."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest
from airflow.sdk import BaseOperator, BaseSensorOperator

from airflow_ml_provider.get_provider_info import get_provider_info

MAX_PARAMETERS = 15


def _operators() -> list[type]:
    modules = [module for item in get_provider_info()["operators"] for module in item["python-modules"]]
    found = []
    for name in modules:
        module = importlib.import_module(name)
        found += [obj for attr, obj in vars(module).items()
                  if inspect.isclass(obj) and obj.__module__ == name and not attr.startswith("_")
                  and issubclass(obj, BaseOperator) and not issubclass(obj, BaseSensorOperator)]
    return found


def parameters(cls: type) -> list[str]:
    """The named parameters of ``cls`` and of this package's classes it derives from."""
    names: list[str] = []
    for klass in cls.__mro__:
        if not klass.__module__.startswith("airflow_ml_provider.") or "__init__" not in vars(klass):
            continue
        for parameter in inspect.signature(klass.__init__).parameters.values():
            if parameter.name != "self" and parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
                names.append(parameter.name) if parameter.name not in names else None
    return names


def args_section(cls: type) -> str | None:
    """The text of the docstring's ``Args:`` section (up to the next unindented line), None without one."""
    doc = inspect.getdoc(cls) or ""
    match = re.search(r"^Args:\n((?:[ \t]+.*\n?|\n)+)", doc, re.MULTILINE)
    return match.group(1) if match else None


OPERATORS = _operators()


def test_the_walk_finds_the_job_operators():
    names = {cls.__name__ for cls in OPERATORS}
    assert {"LightGBMTrainingOperator", "EvaluateModelOperator", "PreprocessOperator",
            "HyperparameterSearchOperator", "RecipeTrialOperator"} <= names


@pytest.mark.parametrize("cls", OPERATORS, ids=lambda cls: cls.__name__)
def test_an_operator_has_at_most_15_parameters_each_named_in_its_args_section(cls):
    names = parameters(cls)
    assert len(names) <= MAX_PARAMETERS, f"{cls.__name__} has {len(names)} parameters: {names}"
    section = args_section(cls)
    assert section is not None, f"{cls.__name__}'s docstring has no Args: section"
    missing = [name for name in names if not re.search(rf"(?<![\w.]){re.escape(name)}\b", section)]
    assert missing == [], f"{cls.__name__}'s Args section does not name {missing}"
