"""SearchSetup: the one place a search's space, settings, storage and study are set up, for the operator
(before deferring and when it resumes) and the trigger alike."""

from __future__ import annotations

import pytest

from airflow_ml_provider.search.space import SearchSpaceError
from airflow_ml_provider.search.study import SearchSetup


def test_the_operator_and_the_trigger_open_the_same_study(tmp_path):
    url = f"journal://{tmp_path}/search.journal"
    operator_side = SearchSetup.parse({"x": [1, 2]}, {"sampler": "grid"}, url)
    study = operator_side.study("dag/task/run")
    # the trigger gets the validated settings as JSON and the same storage URL
    trigger_side = SearchSetup.parse({"x": [1, 2]}, operator_side.settings.model_dump(mode="json"), url)
    again = trigger_side.study("dag/task/run")
    assert again._study_id == study._study_id and trigger_side.settings == operator_side.settings
    assert SearchSetup.parse({"x": [1]}, {"sampler": "grid"}).storage_url.startswith("journal:///")


def test_a_bad_setting_is_refused_naming_it():
    with pytest.raises(SearchSpaceError, match=r"search\.n_trials: .*required"):
        SearchSetup.parse({"x": {"type": "float", "low": 0.0, "high": 1.0}}, {"sampler": "random"})
