"""Whether deploy moves champion: the gate must pass and, where a person was asked, they must approve."""

from __future__ import annotations

import pytest

from airflow_ml_provider.operators.deploy import DeployModelOperator

PASSED = {"passed": True, "reasons": ["no champion yet: nothing to beat"]}
REJECTED = {"passed": False, "reasons": ["accuracy = 0.5 is below the minimum 0.7"]}


@pytest.mark.parametrize(("gate", "approval", "why_not"), [
    (PASSED, None, None),
    (PASSED, {"required": False, "approved": None}, None),
    (PASSED, {"required": True, "approved": True, "by": "ana"}, None),
    (PASSED, {"required": True, "approved": False, "by": "ana"}, "the promotion was rejected by ana"),
    (REJECTED, {"required": False, "approved": None}, "accuracy = 0.5 is below the minimum 0.7"),
    (None, None, "no gate given"),
])
def test_champion_moves_only_when_the_gate_passed_and_no_reviewer_rejected(gate, approval, why_not):
    deploy = DeployModelOperator(task_id="deploy", model_name="m", evaluation={}, gate=gate, approval=approval)
    assert deploy._why_not_promoted() == why_not
