"""Job names: deterministic per task instance, the same for every try, valid on Kubernetes."""

from __future__ import annotations

import re
from dataclasses import replace

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


def test_name_carries_at_least_64_bits_of_digest():
    """Issue 19 L7: a 40-bit digest let two valid run ids collide after 25 s of CPU."""
    digest = identity().name.rsplit("-", 1)[1]
    assert len(digest) * 5 >= 64 and re.fullmatch(r"[a-z2-7]+", digest), digest  # base32 digits


def test_a_trial_job_never_shares_a_name_with_a_task_named_like_it():
    """Issue 19 L7: trial #1 of search task ``tune`` and a task ``tune.trial-1`` (a task ``trial-1`` in a
    TaskGroup ``tune``) got the same job name; the trial number is now its own part of the key."""
    from airflow_ml_provider.search.runner import trial_identity

    search = identity(task_id="tune")
    trial = trial_identity(search, 1)
    task = identity(task_id="tune.trial-1")
    assert trial.name != task.name
    assert trial.name.startswith("aml-tune-trial-1-") and task.name.startswith("aml-tune-trial-1-")  # same text
    assert trial_identity(search, 1).name == trial.name  # a restarted search re-attaches to the same job
    assert trial_identity(replace(search, try_number=2), 1).name == trial.name
    assert len({trial_identity(search, n).name for n in range(100)} | {search.name}) == 101
    for ident in (trial, task, trial_identity(identity(task_id="t" * 300, run_id="r" * 250), 10**6)):
        assert DNS_LABEL.match(ident.name) and len(ident.name) <= 40, ident.name
        for key, value in ident.labels().items():
            assert len(value) <= 63 and LABEL_VALUE.match(value), (key, value)


def test_a_trial_identity_round_trips_through_the_search_triggers_serialized_form():
    """SearchTrigger rebuilds the search's identity with JobIdentity(**asdict(identity))."""
    from dataclasses import asdict

    from airflow_ml_provider.search.runner import trial_identity

    trial = trial_identity(identity(task_id="tune"), 3)
    assert JobIdentity(**asdict(trial)).name == trial.name
