"""MLflow's console output routed into the task log at its own level.

MLflow gives its ``mlflow`` logger a handler of its own that writes to stderr, prints messages such
as "Created version '2' of model ..." straight to stderr (``eprint``) and draws artifact download
progress bars there; Airflow's task runner records every stderr line as an ERROR, so a successful
registration showed red lines. Inside ``mlflow_output_to_task_log()`` MLflow's records propagate to
the task's logging instead (INFO stays INFO), its printed messages become INFO records, the progress
bar is off, and two warnings that do not apply to the models registered here are dropped.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

_PROGRESS_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
_MISMATCH = "Detected one or more mismatches between the model's dependencies"
_COLOR = r"(?:\x1b\[[0-9;]*m)*"  # MLflow colours some warnings
_NOT_APPLICABLE = (  # the registered models carry an explicit signature (float32 features -> probabilities)
    _COLOR + r"Add type hints to the `predict` method",
    _COLOR + r"An input example was not provided when logging the model",
)


@contextmanager
def mlflow_output_to_task_log(not_installed_here: Iterable[str] = ()) -> Iterator[None]:
    """Route MLflow's logging to the task log and turn its progress bars off for the block.

    Args:
        not_installed_here: packages a model requires that this (Airflow) environment does not
            have by design (TensorFlow for a Keras model: it runs in the training image); MLflow's
            "current: uninstalled" warning about exactly these is dropped, any other mismatch stays.
    """
    import mlflow  # noqa: F401  (MLflow installs its stderr handler on import: import first, then re-route)
    from mlflow.utils.logging_utils import MLFLOW_LOGGING_STREAM

    logger = logging.getLogger("mlflow")
    saved_handlers, saved_propagate = logger.handlers[:], logger.propagate
    saved_bar = os.environ.get(_PROGRESS_BAR)
    requirements_logger = logging.getLogger("mlflow.utils.requirements_utils")
    absent = _ExpectedAbsence(not_installed_here)
    printed, show = _LinesToLog(logger), warnings.showwarning
    logger.handlers, logger.propagate = [], True
    os.environ[_PROGRESS_BAR] = "false"
    requirements_logger.addFilter(absent)
    MLFLOW_LOGGING_STREAM.write, MLFLOW_LOGGING_STREAM.flush = printed.write, printed.flush  # eprint()
    # Where a warning is shown, not a warnings filter: MLflow raises some under a "once" filter of its own.
    warnings.showwarning = _without_not_applicable(show)
    try:
        yield
    finally:
        warnings.showwarning = show
        printed.flush()
        del MLFLOW_LOGGING_STREAM.write, MLFLOW_LOGGING_STREAM.flush
        requirements_logger.removeFilter(absent)
        logger.handlers, logger.propagate = saved_handlers, saved_propagate
        if saved_bar is None:
            os.environ.pop(_PROGRESS_BAR, None)
        else:
            os.environ[_PROGRESS_BAR] = saved_bar


class _LinesToLog:
    """A text stream whose complete lines become INFO records."""

    def __init__(self, logger: logging.Logger):
        self.logger, self.pending = logger, ""

    def write(self, text: str) -> int:
        lines = (self.pending + text).split("\n")
        self.pending = lines.pop()
        for line in lines:
            if line.strip():
                self.logger.info("%s", line)
        return len(text)

    def flush(self) -> None:
        if self.pending.strip():
            self.logger.info("%s", self.pending)
        self.pending = ""


def _without_not_applicable(show):
    """``warnings.showwarning`` minus the warnings of ``_NOT_APPLICABLE``."""

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if not any(re.match(pattern, str(message)) for pattern in _NOT_APPLICABLE):
            show(message, category, filename, lineno, file, line)

    return showwarning


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
