"""A training try asks the hook once how its job runs here: one read of the training connection (backend,
artifact directories, worker environment, image, log connection) and one spec built, counted on a real
dag.test() run by wrapping the real connection lookup and the real spec builder."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from airflow.sdk import BaseHook

from airflow_ml_provider.operators.job_runner import JobRunner

pytestmark = pytest.mark.integration


def test_one_connection_read_and_one_spec_per_try(run_dag, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_ML_SETUP_COUNT", json.dumps(
        {"conn_type": "ml_training", "extra": {"backend": "local", "local_root": str(tmp_path)}}))
    reads, specs = Counter(), []
    lookup, build = BaseHook.get_connection.__func__, JobRunner.build_spec

    def counted_lookup(cls, conn_id):
        reads[conn_id] += 1
        return lookup(cls, conn_id)

    def counted_build(self, name, setup=None):
        specs.append(name)
        return build(self, name, setup)

    monkeypatch.setattr(BaseHook, "get_connection", classmethod(counted_lookup))
    monkeypatch.setattr(JobRunner, "build_spec", counted_build)
    result = run_dag("ml_test_setup_count")  # tests/dags/ml_provider_test_dags.py: one training task

    assert result.state == "success", result.task_states
    assert result.xcom["train"]["metrics"]["accuracy"] == 0.9
    assert reads["ml_setup_count"] == 1, f"the training connection was read {reads['ml_setup_count']} times"
    assert len(specs) == 1, f"the spec was built {len(specs)} times in one try"
    assert any((tmp_path / "artifacts").iterdir()), "the job ran under the connection's local_root"
