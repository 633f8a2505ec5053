"""Model governance (issue 19, M1), with the shipped pipeline run for real (dag.test(), local LightGBM jobs,
the real MLflow registry): a run writes only the DAG's own model names, and the gate compares the champion
and the challenger on the same held-out rows, so a user's easy ``data_path`` cannot make a weak model
champion. ``challenger`` names only a version that passed its gate.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from airflow.sdk.exceptions import AirflowFailException, ParamValidationError
from dag_runs import run

from airflow_ml_provider.hooks.model_registry import CHALLENGER, CHAMPION

pytestmark = pytest.mark.integration

MODEL = f"ml_training_pipeline.governance_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def champion(pipeline, registry):
    """A strong model (60 rounds) on the generated set, which has hard rows: champion, version 1."""
    result = run(pipeline, {"model_name": MODEL, "boost_rounds": 60, "min_accuracy": 0.5})
    assert result.state == "success", result.states
    assert result.value("deploy")["promoted"] and result.value("deploy")["version"] == 1
    return result


@pytest.fixture(scope="module")
def easy_data() -> str:
    """Rows of the same task (the generator the pipeline uses, seed 0) that are far from the class
    boundary: an easy test set on which a weak model scores higher than the champion did on its own."""
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression

    X, y = make_classification(n_samples=20_000, n_features=20, n_informative=10, random_state=0)
    margin = LogisticRegression(max_iter=1000).fit(X, y).decision_function(X)
    easy = (np.abs(margin) > 2.5) & ((margin > 0) == (y == 1))
    folder = Path(os.environ["AIRFLOW_HOME"]) / "data" / "governance"  # inside the default data roots
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "easy.npz"
    np.savez(path, X=X[easy].astype(np.float32), y=y[easy].astype(np.float32))
    return str(path)


def test_a_param_naming_another_model_is_refused_before_any_task(pipeline):
    for name in ("other_team_model", "ml_training_pipeline_x", "ml_training_pipelineX"):
        with pytest.raises(ParamValidationError, match="Invalid input for param model_name"):
            pipeline.test(run_conf={"model_name": name})


@pytest.mark.parametrize("task_id", ["gate", "deploy"])
def test_gate_and_deploy_refuse_a_model_name_outside_the_dags_own_naming_the_field(pipeline, registry, task_id):
    """Even when a Param check is bypassed (a DAG without the pattern, a templated name), the tasks that
    write check the name against the DAG author's list."""
    from airflow_ml_provider.operators.deploy import DeployModelOperator
    from airflow_ml_provider.operators.gate import ModelGateOperator

    names = pipeline.get_task(task_id).model_names
    assert names == ["ml_training_pipeline", "ml_training_pipeline.*"]
    evaluation = {"metrics": {"accuracy": 1.0}, "framework": "lightgbm"}
    operator = ModelGateOperator if task_id == "gate" else DeployModelOperator
    kwargs = {"gate": {"passed": True, "reasons": []}} if task_id == "deploy" else {}
    task = operator(task_id=task_id, model_name="other_team_model", model_names=names, evaluation=evaluation,
                    **kwargs)
    context = {"ti": SimpleNamespace(dag_id=pipeline.dag_id, task_id=task_id, run_id="r", try_number=1)}
    with pytest.raises(AirflowFailException, match=r"model_name: 'other_team_model' is not one of the model "
                                                   r"names DAG 'ml_training_pipeline' may write"):
        task.execute(context)
    assert registry.alias_version("other_team_model", CHAMPION) is None


def test_an_easy_data_set_does_not_make_a_weak_model_champion(champion, pipeline, registry, easy_data):
    """The attack of issue 19 M1: a weak model (2 rounds) measured on easy rows scores higher than the
    champion's stored accuracy (measured on harder rows); the old gate promoted it. Now the evaluation
    scores the champion on the same easy rows, where it is better, and the gate rejects."""
    stored = champion.value("evaluate")["metrics"]["accuracy"]
    attack = run(pipeline, {"model_name": MODEL, "data_path": easy_data, "boost_rounds": 2, "learning_rate": 0.05,
                            "min_accuracy": 0.5, "min_improvement": 0.0})
    assert attack.state == "success", attack.states
    evaluation, gate, deploy = attack.value("evaluate"), attack.value("gate"), attack.value("deploy")
    weak, same_rows = evaluation["metrics"]["accuracy"], evaluation["champion"]
    assert weak > stored, f"precondition: the weak model's {weak} beats the stored {stored} (the old gate passed it)"
    assert same_rows["version"] == 1 and same_rows["metrics"]["accuracy"] > weak
    assert not gate["passed"] and gate["champion_metrics"]["accuracy"] == same_rows["metrics"]["accuracy"]
    assert "same rows" in gate["reasons"][-1]
    assert (deploy["promoted"], deploy["aliases"]) == (False, [])
    assert registry.alias_version(MODEL, CHAMPION)["version"] == 1
    assert registry.alias_version(MODEL, CHALLENGER)["version"] == 1, "challenger: only what passed its gate"

    with registry.mlflow() as mlflow:  # both sets of metrics are recorded, on the run and on the version
        run_metrics = mlflow.MlflowClient().get_run(evaluation["mlflow_run_id"]).data.metrics
        tags = mlflow.MlflowClient().get_model_version(MODEL, str(deploy["version"])).tags
    assert run_metrics["accuracy"] == weak and run_metrics["champion_accuracy"] == same_rows["metrics"]["accuracy"]
    assert tags["airflow.compared_with_version"] == "1" and float(tags["champion_metric.accuracy"]) == pytest.approx(
        same_rows["metrics"]["accuracy"], abs=1e-5)


def test_a_challenger_that_beats_the_champion_on_the_same_rows_is_promoted(champion, pipeline, registry):
    """The same-data rule does not block a real improvement: more rounds on the generated set."""
    better = run(pipeline, {"model_name": MODEL, "data_path": None, "boost_rounds": 200, "learning_rate": 0.1,
                            "min_accuracy": 0.5, "gate_metric": "log_loss"})
    assert better.state == "success", better.states
    gate, deploy = better.value("gate"), better.value("deploy")
    assert gate["passed"] and gate["champion_version"] == 1, gate
    same_rows = better.value("evaluate")["champion"]["metrics"]
    assert gate["champion_metrics"]["log_loss"] == same_rows["log_loss"]
    assert same_rows["accuracy"] == champion.value("evaluate")["metrics"]["accuracy"], "the same generated test rows"
    assert deploy["aliases"] == [CHALLENGER, CHAMPION]
    assert registry.alias_version(MODEL, CHAMPION)["version"] == deploy["version"]
    assert registry.alias_version(MODEL, CHALLENGER)["version"] == deploy["version"]
