"""Budgets on the work recipe authors can create, checked where it is created: when a recipe is read (jobs
per file, trials per search: counted arithmetically, before any trial is expanded), when the recipes DAG
file loads a folder (jobs per folder, CPU seconds per file, wall seconds for the whole folder), and in
``airflow-ml validate``. A file over a budget fails alone, naming the budget and its ``[ml_training]`` key.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields

from airflow_ml_provider.search.space import MAX_PARALLEL

SECTION = "ml_training"


@dataclass(frozen=True)
class Budgets:
    """The limits, each configurable as ``[ml_training] recipe_<field>`` (``search_max_parallel``: the bound
    every search has, a recipe's included)."""

    max_jobs_per_file: int = 10_000  # trials of every experiment, search trials included
    max_jobs_per_folder: int = 50_000  # the same, summed over the recipes DAG file's folder
    max_search_trials: int = 4_096  # ``samples`` of one experiment with a ``search:``
    search_max_parallel: int = MAX_PARALLEL  # ``parallel`` of one experiment with a ``search:``
    parse_seconds: float = 5.0  # CPU seconds to read, validate and build one recipe file's DAG
    folder_parse_seconds: float | None = None  # wall seconds for a folder; None: half of dagbag_import_timeout

    @staticmethod
    def key(field: str) -> str:
        return f"[{SECTION}] {Budgets.option(field)}"

    @staticmethod
    def option(field: str) -> str:
        """The ``[ml_training]`` option a field is read from: ``recipe_<field>``, but a ``search_`` field is the
        bound every search has."""
        return field if field.startswith("search_") else f"recipe_{field}"

    @classmethod
    def from_config(cls) -> Budgets:
        """From Airflow's configuration (``AIRFLOW__ML_TRAINING__RECIPE_MAX_JOBS_PER_FILE`` ...) where Airflow
        is installed, else the defaults (``airflow-ml validate`` in CI without Airflow)."""
        try:
            from airflow.sdk import conf
        except ImportError:
            return cls()
        values = {}
        for field in fields(cls):
            name = Budgets.option(field.name)
            if field.type == "int":
                values[field.name] = conf.getint(SECTION, name, fallback=field.default)
            elif conf.get(SECTION, name, fallback=""):
                values[field.name] = conf.getfloat(SECTION, name)
        if values.get("folder_parse_seconds") is None:
            values["folder_parse_seconds"] = conf.getfloat("core", "dagbag_import_timeout", fallback=30.0) / 2
        return cls(**values)


class Clock:
    """CPU seconds spent on one recipe file, against ``parse_seconds``, and the folder's wall deadline."""

    def __init__(self, budgets: Budgets, folder_deadline: float | None = None):
        self.budgets, self.folder_deadline = budgets, folder_deadline
        self.cpu_start = time.process_time()

    def over(self) -> str | None:
        """Which budget is spent, as the refusal says it; None while within both."""
        spent = time.process_time() - self.cpu_start
        if spent > self.budgets.parse_seconds:
            return (f"reading and building this recipe took more than {self.budgets.parse_seconds:g} s of CPU "
                    f"({Budgets.key('parse_seconds')}); it was stopped so the other recipes load")
        if self.folder_deadline is not None and time.monotonic() > self.folder_deadline:
            return (f"the recipes folder's parse budget of {self.budgets.folder_parse_seconds:g} s is spent "
                    f"({Budgets.key('folder_parse_seconds')}); this file was not loaded")
        return None
