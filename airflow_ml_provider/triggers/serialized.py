"""Trigger serialization from the constructor itself, so an argument added later cannot be left out."""

from __future__ import annotations

import inspect
from typing import Any

from airflow.triggers.base import BaseTrigger


class SerializedTrigger(BaseTrigger):
    """``serialize()`` is the class path and every constructor argument, read back from the attribute
    of the same name (each subclass keeps its arguments so): the triggerer rebuilds the trigger with
    exactly what it was built with. An argument not kept as an attribute fails at the first deferral."""

    def serialize(self) -> tuple[str, dict[str, Any]]:
        cls = type(self)
        names = [name for name in inspect.signature(cls.__init__).parameters if name != "self"]
        return f"{cls.__module__}.{cls.__qualname__}", {name: getattr(self, name) for name in names}
