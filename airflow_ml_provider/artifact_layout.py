"""Where a job's artifacts live under the one ``artifact_root`` (Airflow-free: strings only, no I/O).

The root is a local path, a mounted volume (PVC) path, or an object-store URL (``s3://bucket/prefix``,
``gs://bucket/prefix``). Layout, the same for every backend::

    <root>/artifacts/<job>/model/          what the trainer saves (model.txt, model.keras)
    <root>/artifacts/<job>/checkpoints/    ckpt-* files a restarted job resumes from
    <root>/artifacts/<job>/checkpoints/tensorboard/  rank 0's scalars as TensorBoard event files
    <root>/artifacts/<job>/evaluation/     evaluation report and metrics
    <root>/artifacts/<job>.inputs/         files a task hands its job to read (a registered model)
    <root>/data/<dag_id>/<run key>/        the pipeline's raw and preprocessed shards
    <root>/mlartifacts/                    the embedded MLflow registry's artifacts

Job names are validated DNS-1123 names, so a job's directory never leaves ``<root>/artifacts``.
"""

from __future__ import annotations

import re

REMOTE_SCHEMES = ("s3", "gs", "gcs", "abfs", "az")
_URL = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]*)://(?P<rest>.*)$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def scheme(location: str) -> str:
    """``s3``, ``gs``..., or ``""`` for a local path (``file://`` counts as local)."""
    match = _URL.match(location)
    return "" if not match or match["scheme"] == "file" else match["scheme"]


def is_remote(location: str | None) -> bool:
    """True for an object-store URL, False for a local (or mounted) path."""
    return bool(location) and scheme(location) != ""


def check_root(root: str, field: str = "artifact_root") -> str:
    """A usable root: an absolute local path or a URL of a supported object store; trailing ``/`` dropped.

    Raises:
        ValueError: naming ``field`` and the value (relative path, unsupported scheme, ``..``).
    """
    value = root.strip()
    if value.startswith("file://"):
        value = value[len("file://"):]
    if ".." in value.split("/"):
        raise ValueError(f"{field}: {root!r} must not contain '..'")
    if match := _URL.match(value):
        if match["scheme"] not in REMOTE_SCHEMES or not match["rest"].strip("/"):
            raise ValueError(
                f"{field}: {root!r} is not a supported location (an absolute path, or a bucket URL with "
                f"one of the schemes {', '.join(REMOTE_SCHEMES)})"
            )
        return value.rstrip("/")
    if not value.startswith("/"):
        raise ValueError(f"{field}: {root!r} must be an absolute path or an object-store URL such as s3://bucket/ml")
    return value.rstrip("/") or "/"


def join(root: str, *parts: str) -> str:
    """``root/part/...`` with single slashes, for paths and URLs alike."""
    return "/".join([root.rstrip("/"), *(part.strip("/") for part in parts if part)])


def job_artifact_dir(root: str | None, name: str) -> str | None:
    """The job's own directory under ``root`` (None when there is no root, e.g. a cluster backend
    with no ``artifact_root`` configured: pods cannot see the Airflow worker's disk)."""
    if not root:
        return None
    if not _NAME.match(name):
        raise ValueError(f"job name {name!r} is not a DNS-1123 name; it cannot name an artifact directory")
    return join(root, "artifacts", name)


def job_dirs(job_dir: str | None) -> dict[str, str]:
    """The ``model_dir`` and ``checkpoint_dir`` a job gets in its own directory (none without one): the
    one place that lays them out, for training tasks, search trials and recipes alike."""
    return {"model_dir": join(job_dir, "model"), "checkpoint_dir": join(job_dir, "checkpoints")} if job_dir else {}


TENSORBOARD_ENV = "AIRFLOW_ML_TENSORBOARD_DIR"


def tensorboard_dir(checkpoint_dir: str | None) -> str | None:
    """Where a job writes TensorBoard event files (``AIRFLOW_ML_TENSORBOARD_DIR``, as Vertex AI gives
    ``AIP_TENSORBOARD_LOG_DIR``): inside its checkpoint directory, so it is a directory the job may write, kept
    with its checkpoints across a preemption (a resumed attempt adds an event file beside the earlier ones) and
    never a path the job or a person chooses."""
    return join(checkpoint_dir, "tensorboard") if checkpoint_dir else None


def inputs_dir(job_dir: str) -> str:
    """Where a task puts files for its job to read (a registered model): beside the job's own directory, never
    in it, since each attempt's own directory is made anew; the job names them in its ``inputs``."""
    return f"{job_dir.rstrip('/')}.inputs"


def evaluation_dir(job_dir: str) -> str:
    return join(job_dir, "evaluation")


# A recipe command's {{run_dir}}: the DAG run's own data folder (data_dir), known only when a trial runs, so
# left as these characters at parse time and replaced by RecipeTrialOperator (never a fixed, shared /tmp path)
RUN_DIR = "{{run_dir}}"


def data_dir(root: str, dag_id: str, run_key: str) -> str:
    return join(root, "data", dag_id, run_key)


def mlflow_dir(root: str) -> str:
    return join(root, "mlartifacts")
