"""Two pipeline runs promoting at once (issue 40): both gates passed against the same champion (version 1),
then both deploys ran, in one order and in the other (the shipped pipeline, dag.test(), local LightGBM jobs,
the real MLflow registry). Promotion is a compare-and-set: the better model ends champion in both orders; the
worse one, deployed second, says it was superseded. The promotion lock holds another process back.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest
from dag_runs import record, run

from airflow_ml_provider.hooks.model_registry import CHALLENGER, CHAMPION
from support import REPO

pytestmark = pytest.mark.integration

MODEL = f"ml_training_pipeline.promotion_{uuid.uuid4().hex[:8]}"
HELD_BACK = r"^(deploy|summary)$"  # what a gated run has not run yet: its deploy comes later
GATED = {"model_name": MODEL, "gate_metric": "log_loss", "min_accuracy": 0.5}


def _deploy(pipeline, run_id: str) -> dict:
    """Run the run's deploy task now (a next try, as Airflow runs a task instance), and read its result."""
    from airflow.models.dagrun import DagRun
    from airflow.sdk.definitions.dag import _run_task
    from airflow.utils.session import create_session

    with create_session() as session:
        dag_run = session.query(DagRun).filter_by(dag_id=pipeline.dag_id, run_id=run_id).one()
        ti = dag_run.get_task_instance("deploy", session=session)
        ti.try_number += 1
        session.commit()
        _run_task(ti=ti, task=pipeline.task_dict["deploy"])
    return record(pipeline.dag_id, run_id, "").value("deploy")


@pytest.fixture(scope="module")
def gated(pipeline, registry):
    """Version 1 (3 rounds) is champion; then a strong (200 rounds) and a medium (20 rounds) run both pass their
    gates against it, their deploys held back."""
    first = run(pipeline, {**GATED, "boost_rounds": 3})
    assert first.state == "success" and first.value("deploy")["version"] == 1, first.states
    runs = {}
    for name, rounds, rate in (("strong", 200, 0.1), ("medium", 20, 0.05)):
        dag_run = pipeline.test(run_conf={**GATED, "boost_rounds": rounds, "learning_rate": rate},
                                mark_success_pattern=HELD_BACK)
        result = record(pipeline.dag_id, dag_run.run_id, str(dag_run.state))
        assert result.value("gate")["passed"] and result.value("gate")["champion_version"] == 1, result.value("gate")
        runs[name] = result
    assert runs["strong"].value("evaluate")["metrics"]["log_loss"] < runs["medium"].value("evaluate")["metrics"]["log_loss"]
    return runs


def test_the_better_model_deployed_first_stays_champion_and_the_other_is_superseded(gated, pipeline, registry):
    strong = _deploy(pipeline, gated["strong"].run_id)
    medium = _deploy(pipeline, gated["medium"].run_id)
    assert registry.alias_version(MODEL, CHAMPION)["version"] == strong["version"]
    assert (medium["promoted"], medium["aliases"]) == (False, [CHALLENGER])
    assert (strong["promoted"], strong["previous_champion"], strong["gate_again"]) == (True, 1, [])
    assert medium["superseded"].startswith(f"superseded: version {strong['version']} became the champion after "
                                           "the gate compared with version 1, and log_loss = ")
    assert "same rows" in medium["superseded"]
    (again,) = medium["gate_again"]
    assert not again["passed"] and again["champion_version"] == strong["version"]


def test_the_better_model_deployed_second_is_compared_again_and_replaces_the_other(gated, pipeline, registry):
    registry.set_alias(MODEL, CHAMPION, 1)  # the registry as both gates saw it
    medium = _deploy(pipeline, gated["medium"].run_id)
    assert (medium["promoted"], medium["previous_champion"]) == (True, 1)
    strong = _deploy(pipeline, gated["strong"].run_id)
    assert (strong["promoted"], strong["previous_champion"], strong["superseded"]) == (True, medium["version"], None)
    (again,) = strong["gate_again"]
    assert again["passed"] and again["champion_version"] == medium["version"] and "same rows" in again["reasons"][-1]
    assert registry.alias_version(MODEL, CHAMPION)["version"] == strong["version"]


PROMOTE = """
import sys
from airflow_ml_provider.hooks.model_registry import ModelRegistryHook
print("ready", flush=True)
done = ModelRegistryHook().promote(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
print(done.moved, done.previous, flush=True)
"""


def test_the_promotion_lock_holds_another_process_back(gated, registry, tmp_path):
    """Another process's compare-and-set waits for the lock, then sees the champion that moved meanwhile."""
    from airflow_ml_provider.hooks.registry_lock import promotion_lock

    champion = registry.alias_version(MODEL, CHAMPION)["version"]
    settings = registry.settings()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with promotion_lock(settings.registry_uri, settings.promotion_lock, MODEL, tmp_path):
        other = subprocess.Popen([sys.executable, "-c", PROMOTE, MODEL, "2", str(champion)], env=env,
                                 stdout=subprocess.PIPE, text=True)
        assert other.stdout.readline().strip() == "ready"
        time.sleep(3)
        assert other.poll() is None, "the other promotion did not wait for the lock"
        registry.set_alias(MODEL, CHAMPION, 1)  # another promotion, inside the lock
    out, _ = other.communicate(timeout=120)
    assert out.split() == ["False", "1"]
    assert registry.alias_version(MODEL, CHAMPION)["version"] == 1
