"""MLflow's console output routed into the task log at its own level.

MLflow gives its ``mlflow`` logger a handler of its own that writes to stderr, and draws artifact
download progress bars there; Airflow's task runner records every stderr line as an ERROR, so a
successful registration showed red lines ("Created version '2'...", a progress bar). Inside
``mlflow_output_to_task_log()`` MLflow's records propagate to the task's logging instead (INFO
stays INFO) and the progress bar is off.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

_PROGRESS_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
_MISMATCH = "Detected one or more mismatches between the model's dependencies"


@contextmanager
def mlflow_output_to_task_log(not_installed_here: Iterable[str] = ()) -> Iterator[None]:
    """Route MLflow's logging to the task log and turn its progress bars off for the block.

    Args:
        not_installed_here: packages a model requires that this (Airflow) environment does not
            have by design (TensorFlow for a Keras model: it runs in the training image); MLflow's
            "current: uninstalled" warning about exactly these is dropped, any other mismatch stays.
    """
    import mlflow  # noqa: F401  (MLflow installs its stderr handler on import: import first, then re-route)

    logger = logging.getLogger("mlflow")
    saved_handlers, saved_propagate = logger.handlers[:], logger.propagate
    saved_bar = os.environ.get(_PROGRESS_BAR)
    requirements_logger = logging.getLogger("mlflow.utils.requirements_utils")
    absent = _ExpectedAbsence(not_installed_here)
    logger.handlers, logger.propagate = [], True
    os.environ[_PROGRESS_BAR] = "false"
    requirements_logger.addFilter(absent)
    try:
        yield
    finally:
        requirements_logger.removeFilter(absent)
        logger.handlers, logger.propagate = saved_handlers, saved_propagate
        if saved_bar is None:
            os.environ.pop(_PROGRESS_BAR, None)
        else:
            os.environ[_PROGRESS_BAR] = saved_bar


class _ExpectedAbsence(logging.Filter):
    """Drops MLflow's dependency-mismatch warning when it lists only packages known to be absent."""

    def __init__(self, packages: Iterable[str]):
        super().__init__()
        self.packages = {_normalized(p) for p in packages}

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not self.packages or _MISMATCH not in message:
            return True
        listed = [line.strip()[2:] for line in message.splitlines() if line.strip().startswith("- ")]
        expected = all(
            "(current: uninstalled" in item and _normalized(item.split(" ", 1)[0]) in self.packages
            for item in listed
        )
        return not (listed and expected)


def _normalized(name: str) -> str:
    return name.lower().replace("_", "-")
