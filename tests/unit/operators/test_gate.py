"""The gate's decision: thresholds, and "beat the champion by at least X" in each metric's direction."""

from __future__ import annotations

import pytest

from airflow_ml_provider.hooks.model_registry import LINEAGE_KEY
from airflow_ml_provider.operators.gate import decide


def _champion(version=3, key="other", **metrics):
    return {"version": version, "run_id": "r", "tags": {LINEAGE_KEY: key}, "metrics": metrics}


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
    decision = decide({"accuracy": challenger}, {}, "accuracy", min_improvement, _champion(accuracy=0.90))
    assert decision["passed"] is passed
    assert decision["improvement"] == pytest.approx(challenger - 0.90)
    assert decision["champion_version"] == 3


def test_lower_is_better_metrics_improve_downwards():
    assert decide({"log_loss": 0.2}, {}, "log_loss", 0.05, _champion(log_loss=0.3))["passed"]
    assert not decide({"log_loss": 0.28}, {}, "log_loss", 0.05, _champion(log_loss=0.3))["passed"]


def test_the_same_model_as_the_champion_passes_the_comparison():
    decision = decide(
        {"accuracy": 0.9}, {}, "accuracy", 0.5, _champion(key="k1", accuracy=0.9), lineage_key="k1"
    )
    assert decision["passed"] and "already is the champion" in decision["reasons"][0]


def test_a_missing_comparison_metric_rejects():
    assert not decide({"auc": 0.9}, {}, "accuracy", 0.0, None)["passed"]
