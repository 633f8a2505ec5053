"""The promotion gate: metric thresholds, and "the challenger must beat the champion by at least X"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_ml_provider.hooks.model_registry import CHAMPION, LINEAGE_KEY, ModelRegistryHook
from airflow_ml_provider.logs.metrics import metric_goal
from airflow_ml_provider.operators.notify import notify_all



def decide(
    metrics: Mapping[str, float],
    thresholds: Mapping[str, float],
    metric: str,
    min_improvement: float,
    champion: Mapping[str, Any] | None,
    lineage_key: str | None = None,
) -> dict[str, Any]:
    """Whether a challenger with ``metrics`` may replace ``champion`` (``alias_version``'s dict, or None).

    Thresholds are minima, or maxima for metrics where lower is better (``metric_goal``). The
    improvement on ``metric`` is measured in its better direction and must be at least
    ``min_improvement``. No champion, or a champion that is this very model, passes the comparison.
    """
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
    elif (held := champion["metrics"].get(metric)) is None:
        reasons.append(f"the champion (version {champion['version']}) has no {metric}: nothing to compare")
    else:
        improvement = (held - challenger) if metric_goal(metric) == "min" else (challenger - held)
        if improvement < min_improvement:
            passed = False
            reasons.append(
                f"{metric} = {challenger:.6g} improves on the champion's {held:.6g} (version "
                f"{champion['version']}) by {improvement:.6g}, less than the required {min_improvement}"
            )
        else:
            reasons.append(
                f"{metric} = {challenger:.6g} beats the champion's {held:.6g} (version "
                f"{champion['version']}) by {improvement:.6g}"
            )
    return {
        "passed": passed,
        "reasons": reasons,
        "metric": metric,
        "challenger": challenger,
        "champion_version": champion and champion["version"],
        "improvement": improvement,
    }


class ModelGateOperator(BaseOperator):
    """Decides whether the evaluated model may become the ``champion`` of ``model_name``.

    ``thresholds`` maps metric names to bounds (numbers or numeric strings, so DAG Params can be
    templated in); ``min_improvement`` applies to ``metric``. A rejection is a normal outcome, not a
    failure: the task succeeds and returns ``{"passed": false, "reasons": [...]}``, and the deploy
    task then registers the model as ``challenger`` only. On a rejection every one of ``notifiers``
    (Airflow ``BaseNotifier``s: Slack, SMTP, HTTP...) is called with the task's context plus ``gate``
    (the decision and ``model_name``) for its templates, e.g. ``{{ gate.reasons | join('; ') }}``.
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
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
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
        champion = self.registry.alias_version(self.model_name, CHAMPION)
        decision = decide(
            self.evaluation["metrics"],
            thresholds,
            self.metric,
            min_improvement,
            champion,
            self.evaluation.get("lineage_key"),
        )
        self.log.info(
            "Gate %s for model %s:\n  %s",
            "PASSED" if decision["passed"] else "REJECTED",
            self.model_name,
            "\n  ".join(decision["reasons"]),
        )
        if not decision["passed"] and self.notifiers:
            sent = notify_all(self.notifiers, context, self.log, gate={**decision, "model_name": self.model_name})
            self.log.info("Rejection sent through %d of %d notifier(s)", sent, len(self.notifiers))
        return decision
