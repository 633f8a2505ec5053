"""The last word of a pipeline run: what came out (metrics, the gate's verdict, the model version) and
where to look (links), in one task log and one XCom value a person finds on the run's page."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def run_summary(evaluation: dict[str, Any], gate: dict[str, Any], deploy: dict[str, Any],
                approval: dict[str, Any] | None = None) -> dict[str, Any]:
    """The evaluation, gate, approval and deploy results reduced to what a person reads; references only."""
    approval = approval or {}
    return {
        "metrics": evaluation.get("metrics", {}),
        "gate": {"passed": bool(gate.get("passed")), "reasons": list(gate.get("reasons", []))},
        "approval": {"asked": bool(approval.get("required")), "approved": approval.get("approved"),
                     "by": approval.get("by"), "reason": approval.get("reason") or (
                         "no approval step" if gate.get("passed") else "the gate rejected the model: nothing to approve")},
        "model": {
            "name": deploy.get("model_name"),
            "version": deploy.get("version"),
            "aliases": list(deploy.get("aliases", [])),
            "model_uri": deploy.get("model_uri"),
            "url": deploy.get("url") or None,
            "superseded": deploy.get("superseded"),
        },
        "lineage": dict(deploy.get("lineage") or {}),
        "evaluation": {
            "mlflow_run_id": evaluation.get("mlflow_run_id"),
            "url": evaluation.get("url") or None,
            "artifacts_url": evaluation.get("artifacts_url") or None,
        },
    }


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The summary as aligned lines, one subject each."""
    metrics = "  ".join(f"{name}={value:.4f}" for name, value in sorted(summary["metrics"].items()))
    gate, model, evaluation = summary["gate"], summary["model"], summary["evaluation"]
    lines = [f"evaluation  {metrics}"]
    if evaluation["url"]:
        lines.append(f"            MLflow run: {evaluation['url']}")
    if evaluation["artifacts_url"]:
        lines.append(
            f"            artifacts (training_curve.png, evaluation_report.md): {evaluation['artifacts_url']}"
        )
    lines.append(f"gate        {'PASSED' if gate['passed'] else 'REJECTED'}: {'; '.join(gate['reasons'])}")
    approval = summary["approval"]
    if approval["asked"]:
        lines.append(f"approval    {'APPROVED' if approval['approved'] else 'REJECTED'} by {approval['by']}")
    else:
        lines.append(f"approval    not asked: {approval['reason']}")
    if gate["passed"]:
        lines.append(f"model       {model['name']} version {model['version']} ({', '.join(model['aliases'])}), "
                     f"load it as {model['model_uri']}")
    else:  # never offered for loading
        lines.append(f"model       {model['name']} version {model['version']}: registered for the record, "
                     "without an alias; the gate rejected it, do not serve it")
    if model.get("superseded"):
        lines.append(f"            not champion: {model['superseded']}")
    if model["url"]:
        lines.append(f"            MLflow model version: {model['url']}")
    if lineage := summary.get("lineage"):
        lines.append("lineage     " + "  ".join(f"{key}={value}" for key, value in lineage.items()))
    return lines


def log_run_summary(
    evaluation: dict[str, Any], gate: dict[str, Any], deploy: dict[str, Any], approval: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Log the summary (one line per subject) and return it for XCom."""
    summary = run_summary(evaluation, gate, deploy, approval)
    for line in summary_lines(summary):
        log.info("%s", line)
    return summary
