"""Job names: deterministic per task instance, the same for every try, valid on Kubernetes."""

from __future__ import annotations

import re

from airflow_ml_provider.jobs.naming import JobIdentity

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def identity(**overrides) -> JobIdentity:
    return JobIdentity(**{"dag_id": "pipeline", "task_id": "Train_Model", "run_id": "manual__2026-11-21T18:00:00+00:00",
                          "map_index": -1, "try_number": 1, **overrides})


def test_name_is_stable_across_tries_and_distinct_across_instances():
    assert identity().name == identity(try_number=3).name
    names = {identity().name, identity(run_id="scheduled__x").name, identity(map_index=0).name,
             identity(task_id="other").name, identity(dag_id="other").name}
    assert len(names) == 5


def test_name_and_labels_are_valid_kubernetes_values():
    long = identity(task_id="a" * 250, dag_id="d" * 250, run_id="r:" * 100)
    for ident in (identity(), long):
        assert DNS_LABEL.match(ident.name) and len(ident.name) <= 40, ident.name
        for key, value in ident.labels().items():
            assert len(value) <= 63 and LABEL_VALUE.match(value), (key, value)
    assert identity(try_number=2).labels()["ml.airflow.apache.org/try-number"] == "2"
