"""Deployment to the model marketplace: a registry version, aliases, and optionally KServe."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_ml_provider import assets
from airflow_ml_provider.hooks.model_check import verify_model_file
from airflow_ml_provider.hooks.model_registry import (
    CHALLENGER,
    CHAMPION,
    LINEAGE_KEY,
    ModelRegistryHook,
    check_model_name,
)
from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.operators import promotion
from airflow_ml_provider.operators.links import MLflowModelVersionLink
from airflow_ml_provider.reporting import lineage
from airflow_ml_provider.reporting.mlflow_output import mlflow_output_to_task_log


class DeployModelOperator(BaseOperator):
    """Registers the evaluated model as a version of ``model_name``. If ``gate`` passed, points
    ``challenger`` at it and, unless a reviewer rejected it, moves ``champion`` to it too (the version
    replaced is recorded on the new one, so ``ModelRegistryHook.rollback`` can move the alias back).
    A version the gate rejected is registered (for the record) without any alias: ``challenger``
    always names the newest version that passed its gate.

    ``model_name`` must be one of ``model_names`` (names or fnmatch patterns; default: the DAG id):
    a DAG writes only its own models, whatever a Param says.

    The version carries the model (an MLflow pyfunc around the trained file), its signature, the
    evaluation metrics (``metric.<name>``), the champion's metrics on the same rows
    (``champion_metric.<name>``, with ``airflow.compared_with_version``), lineage tags (``airflow.bundle_name``
    and ``airflow.bundle_version``: the DAG bundle and the version the run started on, a git commit for a
    GitDagBundle; ``airflow.dag_id``, ``airflow.run_id``, ``airflow.task_id``, ``airflow.data_version``,
    ``airflow.training_job``, ``airflow.training_backend``, ``airflow.image``; see ``reporting.lineage``)
    and ``description``.
    Registering is idempotent: the version made from the same evaluation run is reused. Promoting is a
    compare-and-set (``operators.promotion``): ``champion`` moves only while it is the version the gate compared
    with; if another run promoted meanwhile, the gate's comparison runs again against that version, and a model
    that does not beat it (or cannot be compared with it) is ``superseded``: it stays challenger.

    Args:
        model_name: the registered model (one of ``model_names``); templated.
        evaluation: ``EvaluateModelOperator``'s result.
        gate: ``ModelGateOperator``'s result; None registers a challenger without promoting it.
        approval: ``ChampionApprovalOperator``'s result; a rejection keeps the champion where it is
            (the version stays ``challenger``: it passed its gate).
        kserve: optional ``KServeTarget`` fields; renders an InferenceService for the version (stored as
            an artifact) and, with ``apply: true``, applies it with the training connection's
            Kubernetes connection.
        description: the version's description; templated.
        registry_conn_id: the model registry (MLflow) connection.
        ml_conn_id: the training connection (its Kubernetes connection applies a KServe service).
        model_names: the model names this DAG may write (names or fnmatch patterns; default: the DAG id).

    Returns (XCom): ``{"model_name", "version", "aliases", "promoted", "previous_champion", "superseded",
    "gate_again", "url", "model_uri", "kserve", "lineage"}`` (``superseded``: None, or why another run's champion
    stays; ``gate_again``: the gate's comparisons run again at promotion). Every Asset in ``outlets`` gets an event whose ``extra`` holds ``name``,
    ``version``, ``model_uri``, ``aliases``, ``gate_passed``, ``promoted``, ``metrics``, ``run_id``,
    ``mlflow_run_id``, ``data_version`` and ``bundle_version`` (see ``airflow_ml_provider.assets``).
    """

    template_fields: Sequence[str] = ("model_name", "evaluation", "gate", "approval", "description", "kserve")
    operator_extra_links = (MLflowModelVersionLink(),)
    ui_color = "#d1f2eb"

    def __init__(
        self,
        *,
        model_name: str,
        evaluation: dict[str, Any],
        gate: dict[str, Any] | None = None,
        approval: dict[str, Any] | None = None,
        description: str = "",
        kserve: dict[str, Any] | None = None,
        registry_conn_id: str = ModelRegistryHook.default_conn_name,
        ml_conn_id: str = TrainingBackendHook.default_conn_name,
        model_names: Sequence[str] | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.model_names = list(model_names) if model_names else None
        self.model_name = model_name
        self.evaluation = evaluation
        self.gate = gate
        self.approval = approval
        self.description = description
        self.kserve = kserve
        self.registry_conn_id = registry_conn_id
        self.ml_conn_id = ml_conn_id

    @cached_property
    def registry(self) -> ModelRegistryHook:
        return ModelRegistryHook(self.registry_conn_id)

    def execute(self, context) -> dict[str, Any]:
        try:
            check_model_name(self.model_name, self.model_names, context["ti"].dag_id)
        except ValueError as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}") from None
        requirements, absent = _requirements(self.evaluation["framework"])
        if absent:
            self.log.info(
                "The model needs %s to be served; %s run%s in the training image, not in this Airflow "
                "environment, so MLflow's check of them against this environment is skipped",
                ", ".join(requirements),
                ", ".join(absent),
                "s" if len(absent) == 1 else "",
            )
        with mlflow_output_to_task_log(absent):
            return self._deploy(context, requirements)

    def _deploy(self, context, requirements: list[str]) -> dict[str, Any]:
        evaluation, ti = self.evaluation, context["ti"]
        tags = lineage.model_tags(context, evaluation["lineage"])
        tags.update(
            {
                "airflow.deploy_task_id": ti.task_id,
                "airflow.try_number": str(ti.try_number),
                "framework": evaluation["framework"],
            }
        )
        tags.update({f"metric.{k}": f"{v:.6g}" for k, v in evaluation["metrics"].items()})
        if evaluation.get("lineage_key"):
            tags[LINEAGE_KEY] = evaluation["lineage_key"]
        if champion := evaluation.get("champion"):
            tags["airflow.compared_with_version"] = str(champion["version"])
            tags.update({f"champion_metric.{k}": f"{v:.6g}" for k, v in champion.get("metrics", {}).items()})
        with self._model_file(evaluation) as model_file:
            number = self.registry.register(
                self.model_name,
                evaluation["mlflow_run_id"],
                model_file,
                _signature(evaluation),
                requirements,
                tags,
                self.description,
            )
        passed = bool(self.gate and self.gate.get("passed"))
        if passed:
            self.registry.set_alias(self.model_name, CHALLENGER, number)
        why_not = self._why_not_promoted()
        outcome = {"promoted": False, "previous_champion": None, "superseded": None, "gate_again": []}
        if why_not is None:
            outcome = promotion.promote(self.registry, self.model_name, number, self.gate, evaluation, self.log)
            why_not = outcome["superseded"]
        promoted = outcome["promoted"]
        if not promoted:
            self.log.info(
                "Model %s version %d is %s; the champion stays: %s",
                self.model_name,
                number,
                "the challenger" if passed else "registered without an alias (the gate rejected it)",
                why_not,
            )
        aliases = [CHALLENGER, CHAMPION] if promoted else [CHALLENGER] if passed else []
        result = {
            "model_name": self.model_name,
            "version": number,
            "aliases": aliases,
            **outcome,
            "url": self.registry.version_url(self.model_name, number),
            "model_uri": f"models:/{self.model_name}/{number}",
            "kserve": self._kserve(number, evaluation) if self.kserve else None,
            "lineage": lineage.shown(tags),
        }
        assets.emit(context, self.outlets, {
            "name": self.model_name, "version": number, "model_uri": result["model_uri"],
            "aliases": result["aliases"], "gate_passed": passed, "promoted": promoted,
            "metrics": evaluation["metrics"], "run_id": ti.run_id,
            "mlflow_run_id": evaluation["mlflow_run_id"], "data_version": evaluation["lineage"].get("data_version"),
            "bundle_version": tags["airflow.bundle_version"],
        })
        return result

    @contextmanager
    def _model_file(self, evaluation: dict[str, Any]) -> Iterator[str]:
        """A private copy of the trained model, read from the artifact root (object storage included) with
        the training connection's artifact connection and checked against the sha256 its evaluation
        measured (``ModelTampered`` otherwise): what is registered is what was evaluated."""
        import shutil
        import tempfile

        from airflow_ml_provider.runtime import storage

        location = evaluation["model_path"]
        store = TrainingBackendHook(self.ml_conn_id).artifact_store(evaluation.get("backend"))
        with tempfile.TemporaryDirectory(prefix="deploy-") as tmp, \
                storage.local_copy(store.locate(location) if store else location) as local:
            copy = shutil.copyfile(local, os.path.join(tmp, os.path.basename(local)))
            verify_model_file(copy, evaluation["lineage"].get("model_sha256"),
                              f"model {self.model_name!r} (evaluation run {evaluation['mlflow_run_id']})", location)
            yield copy

    def _why_not_promoted(self) -> str | None:
        """None if the gate passed and, where a person had to approve (``ChampionApprovalOperator``),
        they did; else why the champion stays."""
        if not (self.gate and self.gate["passed"]):
            return "; ".join((self.gate or {}).get("reasons", ["no gate given"]))
        if self.approval and self.approval.get("approved") is False:
            reason = self.approval.get("reason") or f"rejected by {self.approval.get('by') or 'a reviewer'}"
            return f"the promotion was {reason}"  # "rejected by ana", "not approved: nobody answered ..."
        return None

    def _kserve(self, number: int, evaluation: dict[str, Any]) -> dict[str, Any]:
        import yaml

        from airflow_ml_provider.serving import kserve

        try:
            target = kserve.KServeTarget.model_validate(self.kserve)
        except ValueError as exc:
            raise AirflowFailException(f"{self.task_id}: kserve: {exc}") from None
        labels = {
            "app.kubernetes.io/managed-by": "airflow-ml-provider",
            "ml.airflow.apache.org/model-version": str(number),
        }
        manifest = kserve.inference_service(
            target, self.model_name, number, self.registry.download_uri(self.model_name, number), labels
        )
        uri = self.registry.log_text(
            evaluation["mlflow_run_id"],
            yaml.safe_dump(manifest, sort_keys=False),
            "kserve/inference_service.yaml",
        )
        applied = None
        if target.apply:
            from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

            conn_id = TrainingBackendHook(self.ml_conn_id).kubernetes_conn_id()
            applied = kserve.apply(KubernetesHook(conn_id=conn_id).api_client, manifest)
            self.log.info(
                "InferenceService %s/%s %s", target.namespace, manifest["metadata"]["name"], applied
            )
        return {
            "manifest_uri": uri,
            "name": manifest["metadata"]["name"],
            "namespace": target.namespace,
            "applied": applied,
        }


def _signature(evaluation: dict[str, Any]):
    """Float32 features in, class probabilities out, with the shapes the evaluation measured."""
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.types import Schema, TensorSpec

    return ModelSignature(
        inputs=Schema([TensorSpec(np.dtype("float32"), (-1, evaluation["n_features"]))]),
        outputs=Schema([TensorSpec(np.dtype("float32"), (-1, evaluation["n_classes"]))]),
    )


def _requirements(framework: str) -> tuple[list[str], list[str]]:
    """What serving the model needs, pinned to this environment's versions where installed, and the
    packages that are not installed here (a Keras model's TensorFlow, a PyTorch model's torch live in the
    training image)."""
    packages = ["numpy", {"lightgbm": "lightgbm", "pytorch": "torch"}.get(framework, "tensorflow-cpu")]
    pinned, absent = [], []
    for package in packages:
        try:
            pinned.append(f"{package}=={version(package)}")
        except PackageNotFoundError:
            pinned.append(package)
            absent.append(package)
    return pinned, absent
