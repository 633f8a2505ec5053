"""ml_batch_scoring scores with the newest version of its model among the Asset events queued before its
run, whatever order Airflow hands them in (the run's consumed events are an unordered relationship), and
never with another model's."""

from __future__ import annotations

import runpy
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowSkipException

from support import REPO

MODEL = "ml_training_pipeline.model"


def _event(version: int, minutes: int, name: str = "churn", gate_passed: bool = True) -> SimpleNamespace:
    """The fields of Airflow's AssetEventDagRunReference that choose_model reads (as DeployModelOperator sends them)."""
    extra = {"name": name, "version": version, "run_id": f"run-{version}", "metrics": {"auc": 0.9},
             "gate_passed": gate_passed}
    return SimpleNamespace(extra=extra, timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(minutes=minutes))


def _choose():
    return runpy.run_path(str(REPO / "dags" / "ml_batch_scoring.py"))["dag"].task_dict["choose_model"].python_callable


def test_the_newest_queued_event_wins_in_any_order():
    choose = _choose()
    params = {"model_name": "churn"}
    for events in ([_event(3, 30), _event(2, 20)], [_event(2, 20), _event(3, 30)]):
        by_asset = {asset: events for asset in (MODEL,)}
        chosen = choose(params, triggering_asset_events=_Events(by_asset))
        assert chosen["model_uri"] == "models:/churn/3" and chosen["trigger"] == "asset event of DAG run run-3"
    assert choose(params, triggering_asset_events=None)["model_uri"] == "models:/churn@champion"


def test_a_newer_version_whose_gate_failed_is_not_scored_with():
    choose = _choose()
    events = [_event(2, 20), _event(3, 30, gate_passed=False)]
    assert choose({"model_name": "churn"}, triggering_asset_events=_Events({MODEL: events}))["model_uri"] == "models:/churn/2"
    with pytest.raises(AirflowSkipException, match="passed its gate"):
        choose({"model_name": "churn"}, triggering_asset_events=_Events({MODEL: events[1:]}))


def test_a_newer_version_of_another_model_is_not_scored_with():
    choose = _choose()
    params = {"model_name": "churn"}
    events = [_event(2, 20), _event(7, 40, name="churn-experiment")]
    chosen = choose(params, triggering_asset_events=_Events({MODEL: events}))
    assert chosen["model_uri"] == "models:/churn/2"
    with pytest.raises(AirflowSkipException, match=r"for \['churn-experiment'\], not 'churn'"):
        choose(params, triggering_asset_events=_Events({MODEL: events[1:]}))


class _Events(dict):
    """Airflow's TriggeringAssetEventsAccessor is looked up by the Asset object; keyed here by its name."""

    def __getitem__(self, asset):
        return super().__getitem__(getattr(asset, "name", asset))
