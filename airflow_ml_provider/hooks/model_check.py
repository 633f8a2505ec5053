"""A model file is checked against the sha256 its evaluation measured before anything loads or registers it.

The evaluation job reports the hash of the file it scored (``runtime.evaluate``); deploy registers the
version with it as the ``airflow.model_sha256`` tag. Deploy checks the trained file against the evaluation's
hash, and every registered file handed to a job (a champion for the gate, a version for batch scoring) is
checked against its version's tag: a file a job rewrote in the artifact root or under ``mlartifacts`` is
refused, never loaded.
"""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowFailException

from airflow_ml_provider.runtime import storage

MODEL_SHA256 = "airflow.model_sha256"  # a registered version's tag: the sha256 of its model file


class ModelTampered(AirflowFailException):
    """A model file whose content is not the one evaluated (changed since, or never measured)."""


def verify_model_file(path: str, expected: str | None, model: str, shown: str | None = None) -> str:
    """``path``'s sha256 when it is ``expected``; ``shown`` names the file in an error (default: ``path``),
    e.g. where a downloaded copy came from.

    Raises:
        ModelTampered: naming ``model`` (e.g. ``model 'm' version 3``), the file and both hashes, or saying
            that no hash was recorded to check it against.
    """
    actual, shown = storage.sha256(path), shown or path
    if not expected:
        raise ModelTampered(f"{model}: no {MODEL_SHA256} was recorded for it, so its file {shown} (sha256 {actual}) "
                            "cannot be checked; refused. Evaluate and deploy it again to record one")
    if actual != expected:
        raise ModelTampered(f"{model}: its file {shown} has sha256 {actual}, but {expected} was recorded when it "
                            "was evaluated; refused: the file changed since")
    return actual
