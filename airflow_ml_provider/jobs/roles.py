"""Jobs of several roles: named replica groups (``ps``, ``worker``, ``chief``), each with its own count, command,
resources, image and failure policy (``TrainingJobSpec.roles``).

A homogeneous job has no ``roles``: it stays one group of ``num_workers`` and renders as before. A job with roles
runs framework ``tensorflow-ps`` (parameter-server training, ``TF_CONFIG`` per process): one ``chief`` that
coordinates, one or more ``ps`` that hold the variables, one or more ``worker`` that run the steps. What a
process's end means is its role's ``on_failure``:

- ``fail`` (``ps``, ``chief``; a ps always): the job ends FAILED, or PREEMPTED when the process was evicted (asked
  to stop by SIGTERM, as a kubelet's eviction and a node drain do), and a resubmitted job resumes from the
  chief's newest checkpoint;
- ``tolerate`` (``worker`` by default): the job goes on with the others while at least ``min_count`` of the
  role are left (default 1); ``ClusterCoordinator`` runs the lost worker's steps on them.
The chief's own end is the job's: exit 0 is SUCCEEDED, and the servers (ps, workers) are then stopped.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

TF_ROLES = ("chief", "ps", "worker")  # the task types of a TF_CONFIG cluster that ParameterServerStrategy reads
# Bundled trainers that train a Keras 3 model, which ParameterServerStrategy cannot (keras-team/keras#18624)
KERAS3_TRAINERS = ("airflow_ml_provider.runtime.horovod_keras", "airflow_ml_provider.runtime.horovod_elastic")
PS_TRAINER = "airflow_ml_provider.runtime.tf_ps_trainer"
ROLE_ENV, ROLE_INDEX_ENV = "AIRFLOW_ML_ROLE", "AIRFLOW_ML_ROLE_INDEX"


class OnFailure(str, Enum):
    """What the end of one of a role's processes (not 0, or killed) does to the job."""

    FAIL = "fail"  # the job ends FAILED (PREEMPTED when the process was evicted)
    TOLERATE = "tolerate"  # the job goes on while at least min_count of the role are left


DEFAULT_POLICY = {"chief": OnFailure.FAIL, "ps": OnFailure.FAIL, "worker": OnFailure.TOLERATE}


def policy(name: str, role: Any) -> OnFailure:
    """What the end of a process of ``role`` (a ``jobs.spec.Role``) does to the job."""
    return role.on_failure or DEFAULT_POLICY.get(name, OnFailure.FAIL)


def check_ps_roles(roles: dict[str, Any], command: list[str]) -> None:
    """A tensorflow-ps job's roles as ParameterServerStrategy needs them; ValueError naming the field."""
    if unknown := sorted(set(roles) - set(TF_ROLES)):
        raise ValueError(f"roles.{unknown[0]}: a tensorflow-ps job's roles are {', '.join(TF_ROLES)}")
    if missing := [name for name in TF_ROLES if name not in roles]:
        raise ValueError(f"roles.{missing[0]}: a tensorflow-ps job needs a chief, one or more ps and one or more "
                         "workers")
    if roles["chief"].count != 1 or roles["chief"].elastic:
        raise ValueError("roles.chief.count: a tensorflow-ps job has one chief (it coordinates the steps)")
    ps = roles["ps"]
    if ps.elastic:
        raise ValueError("roles.ps.min_count: parameter servers are never elastic (each holds a part of the "
                         "variables; the cluster is fixed at start)")
    if ps.on_failure is OnFailure.TOLERATE:
        raise ValueError("roles.ps.on_failure: a parameter server's loss loses its variables: it fails the job")
    for name, role in roles.items():
        argv = role.command or command
        if trainer := next((t for t in KERAS3_TRAINERS if _runs(argv, t)), None):
            field = f"roles.{name}.command" if role.command else "command"
            raise ValueError(f"{field}: {trainer} trains a Keras 3 model, and Keras 3 does not support "
                             f"ParameterServerStrategy (keras-team/keras#18624); run {PS_TRAINER} (a custom "
                             "training loop) or a loop of your own")


def _runs(argv: list[str], module: str) -> bool:
    """Whether ``argv`` runs ``module`` (``python -m module`` or its file)."""
    path = module.replace(".", "/") + ".py"
    return any(arg == module or arg.endswith(path) for arg in argv[:4])


def process_count(roles: dict[str, Any]) -> int:
    return sum(role.count for role in roles.values())


def tf_config(cluster: dict[str, list[str]], task_type: str, index: int) -> str:
    """``TF_CONFIG`` of one process: the whole cluster (addresses by role) and its own task."""
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}}, sort_keys=True)


def task_env(cluster: dict[str, list[str]], role: str, index: int, rank: int) -> dict[str, str]:
    """The variables one process of a job of roles gets: its ``TF_CONFIG``, role, index in it, and rank in the job."""
    return {"TF_CONFIG": tf_config(cluster, role, index), ROLE_ENV: role, ROLE_INDEX_ENV: str(index),
            "AIRFLOW_ML_RANK": str(rank)}
