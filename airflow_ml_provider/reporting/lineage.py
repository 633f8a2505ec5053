"""Where a model version came from, as registry tags: the DAG bundle and its version (a git commit for a
GitDagBundle), the DAG run, the data version, the training job, its backend and image.

The bundle is the one the task instance runs from: a run keeps the bundle version it started on (unless
the DAG allows bundle versioning to be disabled), so a version deployed by a run that started before a
newer commit names the commit it was trained with.
"""

from __future__ import annotations

from typing import Any

UNKNOWN = "unknown"
# the tags the run summary shows, in this order
SHOWN = ("bundle_name", "bundle_version", "dag_id", "run_id", "data_version", "training_job", "training_backend",
         "image")


def bundle(context: Any) -> dict[str, str]:
    """The name and version of the bundle the task instance was loaded from: the version its DAG run is
    pinned to (the worker checked that version out), else the bundle's current one (versioning disabled)."""
    instance = getattr(context["ti"], "bundle_instance", None)
    version = getattr(instance, "version", None)
    if version is None and instance is not None:
        try:
            current = instance.get_current_version()
        except Exception:  # noqa: BLE001 - lineage never fails a deploy: the tag says "unversioned"
            current = None
        version = getattr(current, "version", current)
    return {"bundle_name": str(getattr(instance, "name", None) or UNKNOWN),
            "bundle_version": str(version or "unversioned")}


def model_tags(context: Any, lineage: dict[str, Any]) -> dict[str, str]:
    """The evaluation's lineage plus the bundle's, as ``airflow.<key>`` tags (values are data: strings)."""
    return {f"airflow.{key}": str(value) for key, value in {**lineage, **bundle(context)}.items()}


def shown(tags: dict[str, str]) -> dict[str, str]:
    """The lineage a person reads in the run summary, from the version's tags."""
    return {key: tags[f"airflow.{key}"] for key in SHOWN if f"airflow.{key}" in tags}
