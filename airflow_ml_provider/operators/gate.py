"""The promotion gate: metric thresholds, and "the challenger must beat the champion by at least X",
both measured on the same held-out rows (the evaluation scores the champion next to the challenger)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from airflow_ml_provider.hooks.model_registry import (
    CHAMPION,
    LINEAGE_KEY,
    ModelRegistryHook,
    check_model_name,
)
from airflow_ml_provider.reporting.notify import notify_all

XCOM_RETURN_KEY = "return_value"
ROWS_TAG = "airflow.test_rows_sha256"  # a version's held-out rows (reporting.lineage tags the evaluation's lineage)


def decide(
    metrics: Mapping[str, float],
    thresholds: Mapping[str, float],
    metric: str,
    min_improvement: float,
    champion: Mapping[str, Any] | None,
    lineage_key: str | None = None,
    measured: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Whether a challenger with ``metrics`` may replace ``champion`` (``alias_version``'s dict, or None).

    Thresholds are minima, or maxima for metrics where lower is better (``metric_goal``). The
    improvement on ``metric`` is measured in its better direction and must be at least
    ``min_improvement``, against ``measured``: the champion scored on the challenger's own test rows
    (the evaluation's ``champion``). The champion's stored metrics, from other data, are never used:
    without a measurement of the current champion on these rows the challenger is rejected. No
    champion, or a champion that is this very model, passes the comparison.
    """
    from airflow_ml_provider.logs.metrics import metric_goal  # the log metrics' module: at execution only

    reasons, passed = [], True
    for name, bound in sorted(thresholds.items()):
        value, lower = metrics.get(name), metric_goal(name) == "min"
        if value is None:
            passed = False
            reasons.append(f"{name}: not reported by the evaluation (threshold {bound})")
        elif (value > bound) if lower else (value < bound):
            passed = False
            reasons.append(
                f"{name} = {value:.6g} is {'above the maximum' if lower else 'below the minimum'} {bound}"
            )
    challenger, improvement = metrics.get(metric), None
    if challenger is None:
        passed = False
        reasons.append(f"{metric}: the comparison metric was not reported by the evaluation")
    elif champion is None:
        reasons.append("no champion yet: nothing to beat")
    elif lineage_key and champion["tags"].get(LINEAGE_KEY) == lineage_key:
        reasons.append(f"this model already is the champion (version {champion['version']})")
    elif not measured or measured.get("version") != champion["version"]:
        passed = False
        reasons.append(
            f"the champion is version {champion['version']}, but the evaluation scored "
            f"{'version ' + str(measured['version']) if measured else 'no champion'} on these rows: "
            "not comparable (evaluate again)"
        )
    elif measured.get("error"):
        passed = False
        reasons.append(
            f"the champion (version {champion['version']}) could not be scored on this test set "
            f"({measured['error']}): not comparable"
        )
    elif (held := measured.get("metrics", {}).get(metric)) is None:
        passed = False
        reasons.append(f"the champion (version {champion['version']}) has no {metric} on these rows")
    else:
        improvement = (held - challenger) if metric_goal(metric) == "min" else (challenger - held)
        if improvement < 0:  # worse: never "improves by -0.03"
            passed = False
            reasons.append(
                f"{metric} = {challenger:.6g} is worse than the champion's {held:.6g} (version "
                f"{champion['version']}, same rows) by {-improvement:.6g}; the required improvement is {min_improvement}"
            )
        elif improvement < min_improvement:
            passed = False
            reasons.append(
                f"{metric} = {challenger:.6g} improves on the champion's {held:.6g} (version "
                f"{champion['version']}, same rows) by {improvement:.6g}, less than the required {min_improvement}"
            )
        else:
            reasons.append(
                f"{metric} = {challenger:.6g} beats the champion's {held:.6g} (version "
                f"{champion['version']}, same rows) by {improvement:.6g}"
            )
    return {
        "passed": passed,
        "reasons": reasons,
        "metric": metric,
        "challenger": challenger,
        "champion_version": champion and champion["version"],
        "champion_metrics": dict(measured.get("metrics", {})) if measured else None,
        "improvement": improvement,
        "min_improvement": min_improvement,
    }


def compare_again(gate: Mapping[str, Any], evaluation: Mapping[str, Any], champion: Mapping[str, Any]) -> dict[str, Any]:
    """The gate's comparison run again, against ``champion`` (``alias_version``'s dict): a version that became
    champion after the gate compared with another. Its metrics compare only where it was evaluated on the very
    rows this model was (its ``airflow.test_rows_sha256`` tag is this evaluation's); else the decision says the
    two are not comparable. The thresholds were met already: they do not depend on the champion."""
    rows = evaluation.get("lineage", {}).get("test_rows_sha256")
    same_rows = bool(rows) and champion["tags"].get(ROWS_TAG) == rows
    measured = {"version": champion["version"], "metrics": champion["metrics"]} if same_rows else None
    return decide(evaluation["metrics"], {}, gate["metric"], float(gate.get("min_improvement", 0.0)), champion,
                  evaluation.get("lineage_key"), measured)


class ModelGateOperator(BaseOperator):
    """Decides whether the evaluated model may become the ``champion`` of ``model_name``.

    ``thresholds`` maps metric names to bounds (numbers or numeric strings, so DAG Params can be
    templated in); ``min_improvement`` applies to ``metric``, compared with the champion as the
    evaluation measured it on the same rows (``EvaluateModelOperator(model_name=...)``). A rejection is
    a normal outcome, not a failure, but one a person sees in the run: the task ends *skipped*, its log and
    its XCom (``{"passed": false, "reasons": [...]}``, pushed before the skip) saying why, and a deploy task
    downstream (``trigger_rule="none_failed_min_one_success"``) then registers the model without an alias. ``model_name`` must be
    one of ``model_names`` (names or fnmatch patterns; default: the DAG id): a DAG writes only its
    own models. On a rejection every one of ``notifiers``
    (Airflow ``BaseNotifier``s: Slack, SMTP, HTTP...) is called with the task's context plus ``gate``
    (the decision and ``model_name``) for its templates, e.g. ``{{ gate.reasons | join('; ') }}``.

    Args:
        evaluation: ``EvaluateModelOperator``'s result; templated.
        model_name: the registered model whose champion the model would replace; templated.
        metric: the metric ``min_improvement`` applies to; templated.
        thresholds: metric name -> lowest acceptable value; templated.
        min_improvement: how much ``metric`` must beat the champion's by; templated.
        registry_conn_id: the model registry (MLflow) connection.
        notifiers: called on a rejection (see above).
        model_names: the model names this DAG may write (default: the DAG id).
    """

    template_fields: Sequence[str] = ("evaluation", "model_name", "metric", "thresholds", "min_improvement")
    ui_color = "#fcf3cf"

    def __init__(
        self,
        *,
        evaluation: dict[str, Any],
        model_name: str,
        metric: str = "accuracy",
        thresholds: dict[str, float | str] | None = None,
        min_improvement: float | str = 0.0,
        registry_conn_id: str = ModelRegistryHook.default_conn_name,
        notifiers: Sequence[Any] = (),
        model_names: Sequence[str] | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.model_names = list(model_names) if model_names else None
        self.notifiers = list(notifiers)
        self.evaluation = evaluation
        self.model_name = model_name
        self.metric = metric
        self.thresholds = thresholds or {}
        self.min_improvement = min_improvement
        self.registry_conn_id = registry_conn_id

    @cached_property
    def registry(self) -> ModelRegistryHook:
        return ModelRegistryHook(self.registry_conn_id)

    def execute(self, context) -> dict[str, Any]:
        try:
            thresholds = {name: float(bound) for name, bound in self.thresholds.items()}
            min_improvement = float(self.min_improvement)
        except (TypeError, ValueError) as exc:
            raise AirflowFailException(f"{self.task_id}: thresholds must be numbers: {exc}") from None
        try:
            check_model_name(self.model_name, self.model_names, context["ti"].dag_id)
        except ValueError as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}") from None
        measured = self.evaluation.get("champion")
        if self.evaluation.get("model_name") not in (None, self.model_name):
            measured = None  # measured against another model's champion: not this comparison
        champion = self.registry.alias_version(self.model_name, CHAMPION)
        decision = decide(
            self.evaluation["metrics"],
            thresholds,
            self.metric,
            min_improvement,
            champion,
            self.evaluation.get("lineage_key"),
            measured,
        )
        decision["model_name"] = self.model_name
        self.log.info(
            "Gate %s for model %s:\n  %s",
            "PASSED" if decision["passed"] else "REJECTED",
            self.model_name,
            "\n  ".join(decision["reasons"]),
        )
        if not decision["passed"] and self.notifiers:
            sent = notify_all(self.notifiers, context, self.log, gate={**decision, "model_name": self.model_name})
            self.log.info("Rejection sent through %d of %d notifier(s)", sent, len(self.notifiers))
        if not decision["passed"]:
            context["ti"].xcom_push(XCOM_RETURN_KEY, decision)  # what downstream tasks read, skipped or not
            raise AirflowSkipException(f"Gate REJECTED model {self.model_name}: {'; '.join(decision['reasons'])} "
                                       "(the task is skipped to show it; the model stays without an alias)")
        return decision
