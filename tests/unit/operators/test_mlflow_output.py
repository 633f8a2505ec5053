"""MLflow's console output inside a task: records at their level in the task's logging, never raw stderr
(which Airflow's task runner logs as ERROR); the real MLflow functions that print are used."""

from __future__ import annotations

import logging
import os
import warnings

import pytest

from airflow_ml_provider.reporting.mlflow_output import mlflow_output_to_task_log

MISMATCH = (
    "Detected one or more mismatches between the model's dependencies and the current Python environment:\n"
    " - {}\nTo fix the mismatches, call `mlflow.pyfunc.get_model_dependencies(model_uri)` ..."
)


def test_printed_messages_and_log_records_reach_logging_at_info_not_stderr(capfd, caplog):
    from mlflow.utils.logging_utils import eprint

    caplog.set_level(logging.INFO)
    with mlflow_output_to_task_log():
        eprint("Successfully registered model 'm'.")
        eprint("Created version '2' of model 'm'.")
        logging.getLogger("mlflow.store.db.utils").info("Creating initial MLflow database tables...")
        assert os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == "false"
    assert capfd.readouterr().err == ""
    records = [(r.name, r.levelname, r.getMessage()) for r in caplog.records if r.name.startswith("mlflow")]
    assert records == [
        ("mlflow", "INFO", "Successfully registered model 'm'."),
        ("mlflow", "INFO", "Created version '2' of model 'm'."),
        ("mlflow.store.db.utils", "INFO", "Creating initial MLflow database tables..."),
    ]


def test_everything_is_restored_afterwards(capfd):
    from mlflow.utils.logging_utils import eprint

    logger = logging.getLogger("mlflow")
    before = (logger.handlers[:], logger.propagate, os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"))
    with mlflow_output_to_task_log(["tensorflow-cpu"]):
        pass
    assert (logger.handlers, logger.propagate, os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")) == before
    eprint("outside")
    assert capfd.readouterr().err == "outside\n"


def test_the_uninstalled_warning_is_dropped_only_for_packages_known_to_be_absent(caplog):
    from mlflow.utils.requirements_utils import warn_dependency_requirement_mismatches

    caplog.set_level(logging.INFO)
    with mlflow_output_to_task_log(["tensorflow-cpu"]):
        warn_dependency_requirement_mismatches(["tensorflow-cpu==2.21.0"])  # the real check, not installed here
        warn_dependency_requirement_mismatches(["numpy==0.0.1"])  # a real mismatch stays
        logging.getLogger("mlflow.utils.requirements_utils").warning(
            MISMATCH.format("tensorflow-cpu (current: uninstalled, required: tensorflow-cpu)")
        )
    warnings_seen = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings_seen) == 1 and "numpy (current: " in warnings_seen[0]


@pytest.mark.parametrize(
    "message",
    [
        "\x1b[33mAdd type hints to the `predict` method to enable data validation\x1b[0m",
        "\x1b[1;33mAn input example was not provided when logging the model. To ensure ...\x1b[0m",
    ],
)
def test_warnings_that_do_not_apply_are_dropped_others_kept(message):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with mlflow_output_to_task_log():
            with warnings.catch_warnings():  # as MLflow raises some: under a "once" filter of its own
                warnings.simplefilter("once", category=UserWarning)
                warnings.warn(message, UserWarning, stacklevel=1)
            warnings.warn("something else", UserWarning, stacklevel=1)
        warnings.warn(message, UserWarning, stacklevel=1)  # outside the block: shown
    assert [str(w.message) for w in seen] == ["something else", message]
