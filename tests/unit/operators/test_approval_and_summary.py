"""Issue 25 D7: the approve task says whether it asked a person and why not; the run's summary includes
the approval's outcome."""

from __future__ import annotations

import pytest

from airflow_ml_provider.operators.approval import ChampionApprovalOperator
from airflow_ml_provider.reporting.summary import run_summary, summary_lines

EVALUATION = {"metrics": {"accuracy": 0.93}, "mlflow_run_id": "r1"}
DEPLOY = {"model_name": "m", "version": 4, "aliases": ["challenger"], "model_uri": "models:/m/4"}


@pytest.mark.parametrize(("gate", "require", "reason"), [
    ({"passed": True}, False, "approval not required"),
    ({"passed": False}, True, "the gate rejected the model: nothing to approve"),
])
def test_the_approve_task_logs_that_nobody_was_asked_and_why(capsys, gate, require, reason):
    task = ChampionApprovalOperator(task_id="approve", gate=gate, model_name="m", require_approval=require)
    result = task.execute({})
    assert result == {"required": False, "approved": None, "by": None, "at": None, "reason": reason}
    assert f"Nobody was asked to approve the promotion of m: {reason}" in capsys.readouterr().out  # the task log


@pytest.mark.parametrize(("approval", "line"), [
    ({"required": True, "approved": False, "by": "ana", "reason": "rejected by ana"}, "approval    REJECTED by ana"),
    ({"required": True, "approved": True, "by": "ana", "reason": "approved by ana"}, "approval    APPROVED by ana"),
    ({"required": False, "approved": None, "reason": "approval not required"},
     "approval    not asked: approval not required"),
])
def test_the_summary_includes_the_approval(approval, line):
    summary = run_summary(EVALUATION, {"passed": True, "reasons": ["no champion yet"]}, DEPLOY, approval)
    assert summary["approval"]["asked"] is approval["required"] and summary["approval"]["by"] == approval.get("by")
    assert line in summary_lines(summary)


def test_the_summary_of_a_rejected_model_never_offers_to_load_it():
    """Issue 45 D4: it said "version 5 (), load it as models:/ml_training_pipeline/5" for a rejected version;
    its approve task is skipped with the gate (no approval result)."""
    rejected = {"passed": False, "reasons": ["accuracy = 0.5 is below the minimum 0.9"]}
    lines = summary_lines(run_summary(EVALUATION, rejected, {**DEPLOY, "aliases": []}, None))
    assert "gate        REJECTED: accuracy = 0.5 is below the minimum 0.9" in lines
    assert "model       m version 4: registered for the record, without an alias; the gate rejected it, do not serve it" in lines
    assert "approval    not asked: the gate rejected the model: nothing to approve" in lines
    assert not any("load it" in line or "()" in line for line in lines), lines
