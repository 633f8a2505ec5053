"""A person's approval before ``champion`` moves, through Airflow's own human-in-the-loop operator (the
standard provider's ``ApprovalOperator``: the Required Actions page, the HITL REST API, notifiers).

Put it between the gate and the deploy task and hand its result to ``DeployModelOperator(approval=...)``.
It asks only when approval is required and the gate passed; otherwise it returns at once, so the same
DAG serves runs with and without a reviewer (the pipeline's ``require_approval`` Param).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLOperator


class ChampionApprovalOperator(ApprovalOperator):
    """Asks whether the model the gate passed may become the champion of ``model_name``.

    Args:
        gate: ``ModelGateOperator``'s result.
        model_name: the registered model (for the request's subject).
        evaluation: ``EvaluateModelOperator``'s result, shown to the reviewer (metrics, MLflow run).
        require_approval: whether to ask at all; a bool or its rendered text (``"True"``/``"False"``),
            so a DAG Param can decide per run.

    Waiting is Airflow's: on 3.3 the task parks in ``awaiting_input`` (no worker slot, no trigger)
    until someone answers in the UI or through the API, or ``response_timeout`` passes. ``Approve`` is
    the request's default, so the form highlights it (it only asks when the gate passed), but a
    promotion needs a person: when the timeout applies the default, the answer counts as not approved.
    A rejection does not skip the deploy: the model is still registered, as challenger only.

    Returns (XCom): ``{"required", "approved", "by", "at", "reason"}``; ``approved`` is None when
    nobody was asked.
    """

    template_fields: Sequence[str] = (*HITLOperator.template_fields, "gate", "evaluation", "model_name",
                                      "require_approval")
    ui_color = "#fdebd0"

    def __init__(self, *, gate: dict[str, Any], model_name: str, evaluation: dict[str, Any] | None = None,
                 require_approval: bool | str = True, **kwargs: Any):
        kwargs.setdefault("subject", f"Promote the new version of {model_name} to champion?")
        kwargs.setdefault("defaults", ApprovalOperator.APPROVE)  # the highlighted choice in the HITL form
        super().__init__(**kwargs)
        self.gate = gate
        self.model_name = model_name
        self.evaluation = evaluation
        self.require_approval = require_approval

    def execute(self, context) -> dict[str, Any]:
        if not _flag(self.require_approval):
            return self._not_asked("approval not required")
        if not self.gate.get("passed"):
            return self._not_asked("the gate rejected the model: nothing to approve")
        self.body = self._body()
        self.log.info("Asking a reviewer (Required Actions page) whether %s may become champion", self.model_name)
        return super().execute(context)

    def _not_asked(self, reason: str) -> dict[str, Any]:
        self.log.info("Nobody was asked to approve the promotion of %s: %s", self.model_name, reason)
        return {"required": False, "approved": None, "by": None, "at": None, "reason": reason}

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        # HITLOperator's: validates the answer; ApprovalOperator's would skip the deploy on "Reject"
        answer = HITLOperator.execute_complete(self, context, event)
        person = (answer.get("responded_by_user") or {}).get("name")
        if event.get("timedout") or not person:  # the timeout applied the defaults: nobody decided
            self.log.info("Promotion of %s not approved: nobody answered within %s", self.model_name,
                          self.response_timeout)
            return {"required": True, "approved": False, "by": None, "at": answer["responded_at"].isoformat(),
                    "reason": f"not approved: nobody answered within {self.response_timeout}"}
        approved = answer["chosen_options"] == [self.APPROVE]
        self.log.info("Promotion of %s %s by %s", self.model_name, "approved" if approved else "rejected", person)
        return {"required": True, "approved": approved, "by": person, "at": answer["responded_at"].isoformat(),
                "reason": f"{'approved' if approved else 'rejected'} by {person}"}

    def _body(self) -> str:
        lines = [f"The gate passed the new version of **{self.model_name}**:", ""]
        lines += [f"- {reason}" for reason in self.gate.get("reasons", [])]
        if self.evaluation:
            lines += ["", f"Held-out metrics: `{json.dumps(self.evaluation.get('metrics', {}))}`"]
            if self.evaluation.get("url"):
                lines.append(f"MLflow run: {self.evaluation['url']}")
        lines += ["", "Approve to move the `champion` alias to it; reject to keep it as `challenger` only."]
        return "\n".join(lines)


def _flag(value: bool | str) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).strip().lower() in ("true", "1", "yes"):
        return True
    if str(value).strip().lower() in ("false", "0", "no", ""):
        return False
    raise ValueError(f"require_approval: {value!r} is not a boolean")
