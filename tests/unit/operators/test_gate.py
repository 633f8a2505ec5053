"""The gate's decision: thresholds, and "beat the champion by at least X" in each metric's direction, where
the champion's number is the one measured on the challenger's own rows, never its stored metrics."""

from __future__ import annotations

import pytest

from airflow_ml_provider.hooks.model_registry import LINEAGE_KEY
from airflow_ml_provider.operators.gate import decide


def _champion(version=3, key="other", **metrics):
    return {"version": version, "run_id": "r", "tags": {LINEAGE_KEY: key}, "metrics": metrics}


def _same_rows(version=3, **metrics):
    return {"version": version, "metrics": metrics}


def test_no_champion_passes_when_thresholds_hold():
    decision = decide({"accuracy": 0.9, "auc": 0.95}, {"accuracy": 0.8, "auc": 0.9}, "accuracy", 0.01, None)
    assert decision["passed"] and decision["champion_version"] is None


@pytest.mark.parametrize(
    ("thresholds", "reason"),
    [
        ({"accuracy": 0.95}, "accuracy = 0.9 is below the minimum 0.95"),
        ({"log_loss": 0.2}, "log_loss = 0.3 is above the maximum 0.2"),
        ({"recall": 0.5}, "recall: not reported"),
    ],
)
def test_a_threshold_not_met_rejects(thresholds, reason):
    decision = decide({"accuracy": 0.9, "log_loss": 0.3}, thresholds, "accuracy", 0.0, None)
    assert not decision["passed"]
    assert any(reason in r for r in decision["reasons"]), decision["reasons"]


@pytest.mark.parametrize(
    ("challenger", "min_improvement", "passed"),
    [
        (0.92, 0.01, True),  # +0.02
        (0.905, 0.01, False),  # +0.005: not enough
        (0.90, 0.0, True),  # a tie is enough when no improvement is required
        (0.85, 0.0, False),  # worse
    ],
)
def test_the_challenger_must_beat_the_champion_by_at_least_x(challenger, min_improvement, passed):
    decision = decide({"accuracy": challenger}, {}, "accuracy", min_improvement, _champion(accuracy=0.1),
                      measured=_same_rows(accuracy=0.90))
    assert decision["passed"] is passed
    assert decision["improvement"] == pytest.approx(challenger - 0.90)
    assert decision["champion_version"] == 3


def test_lower_is_better_metrics_improve_downwards():
    champion, measured = _champion(), _same_rows(log_loss=0.3)
    assert decide({"log_loss": 0.2}, {}, "log_loss", 0.05, champion, measured=measured)["passed"]
    assert not decide({"log_loss": 0.28}, {}, "log_loss", 0.05, champion, measured=measured)["passed"]


def test_the_same_model_as_the_champion_passes_the_comparison():
    decision = decide(
        {"accuracy": 0.9}, {}, "accuracy", 0.5, _champion(key="k1", accuracy=0.9), lineage_key="k1"
    )
    assert decision["passed"] and "already is the champion" in decision["reasons"][0]


def test_a_missing_comparison_metric_rejects():
    assert not decide({"auc": 0.9}, {}, "accuracy", 0.0, None)["passed"]


def test_the_champions_stored_metrics_from_other_data_are_never_compared():
    """Issue 19 M1: 1.0 on an easy test set against the champion's stored 0.911 from its own harder set."""
    decision = decide({"accuracy": 1.0}, {}, "accuracy", 0.0, _champion(accuracy=0.911))
    assert not decision["passed"]
    assert "scored no champion on these rows: not comparable" in decision["reasons"][0]


@pytest.mark.parametrize(("measured", "reason"), [
    (_same_rows(version=2, accuracy=0.5), "the champion is version 3, but the evaluation scored version 2"),
    ({"version": 3, "error": "it predicts 3 classes, this test set has 2"}, "could not be scored on this test set"),
    (_same_rows(auc=0.5), "has no accuracy on these rows"),
])
def test_a_champion_not_measured_on_these_rows_rejects(measured, reason):
    decision = decide({"accuracy": 1.0}, {}, "accuracy", 0.0, _champion(accuracy=0.5), measured=measured)
    assert not decision["passed"] and reason in decision["reasons"][0], decision["reasons"]


def test_the_decision_records_the_champions_same_row_metrics():
    decision = decide({"accuracy": 0.95}, {}, "accuracy", 0.0, _champion(), measured=_same_rows(accuracy=0.97))
    assert not decision["passed"] and decision["champion_metrics"] == {"accuracy": 0.97}
    assert "(version 3, same rows)" in decision["reasons"][0]


def test_a_worse_challenger_is_said_to_be_worse_never_to_improve_by_a_negative_number():
    """Issue 45 D4: "improves on the champion's 0.93 ... by -0.02975"."""
    decision = decide({"accuracy": 0.90025}, {}, "accuracy", 0.0, _champion(), measured=_same_rows(accuracy=0.93))
    assert not decision["passed"]
    assert decision["reasons"][-1] == ("accuracy = 0.90025 is worse than the champion's 0.93 (version 3, same rows) "
                                       "by 0.02975; the required improvement is 0.0")
