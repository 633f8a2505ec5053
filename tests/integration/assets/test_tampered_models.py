"""A registered model whose file changed is refused before anything loads it (issue 38, S1b).

A job overwrote both registered ``model.txt`` files under ``mlartifacts``, and ``ml_batch_scoring`` scored with
the attacker's model although the version's ``airflow.model_sha256`` tag said otherwise. Here a version is
registered the way the project does (tests/dags/ml_asset_test_dags.py: the real DeployModelOperator), its
registered file is overwritten with another valid LightGBM model, and batch scoring (the shipped DAG), an
evaluation scoring it as champion, and a deploy of a model changed after its evaluation each refuse, naming
the model, the file and both hashes; the untampered version still scores.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import numpy as np
import pytest
from dag_runs import load_dag, run

from support import REPO, TEST_DAGS

pytestmark = pytest.mark.integration

NAME = f"asset_test_tampered_{uuid.uuid4().hex[:8]}"


def _attackers_model(path: Path, seed: int = 1) -> None:
    """A valid LightGBM model of the same width that predicts the opposite class."""
    import lightgbm as lgb

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(400, 5)).astype(np.float32)
    lgb.train({"objective": "binary", "verbosity": -1, "num_threads": 1}, lgb.Dataset(X, (X[:, 0] < 0).astype(int)),
              5).save_model(path)


@pytest.fixture(scope="module")
def registered(airflow_db):
    """Version 1 of NAME, champion, as the producer DAG registers it: its registered file and recorded hash."""
    from airflow_ml_provider.hooks.model_registry import ModelRegistryHook

    produced = run(load_dag(TEST_DAGS / "ml_asset_test_dags.py", "asset_producer"), {"model_name": NAME})
    assert produced.states[("deploy", -1)] == "success", produced.states  # (its preprocess job is not needed here)
    registry = ModelRegistryHook()
    with registry.mlflow() as mlflow:
        recorded = mlflow.MlflowClient().get_model_version(NAME, "1").tags["airflow.model_sha256"]
    artifacts = registry.download_uri(NAME, 1).rstrip("/") + "/artifacts"
    file = Path(urlsplit(artifacts).path) / "model.txt"
    assert hashlib.sha256(file.read_bytes()).hexdigest() == recorded
    return {"file": file, "shown": f"{artifacts}/model.txt", "recorded": recorded, "registry": registry}


def _tamper(registered) -> str:
    """Overwrite the registered file (what the job did under mlartifacts); returns the new bytes' sha256."""
    _attackers_model(registered["file"])
    return hashlib.sha256(registered["file"].read_bytes()).hexdigest()


def _refusal(registered, actual: str) -> str:
    return (f"model {NAME!r} version 1: its file {registered['shown']} has sha256 {actual}, but "
            f"{registered['recorded']} was recorded when it was evaluated; refused: the file changed since")


def test_batch_scoring_scores_with_the_registered_model_and_refuses_it_once_tampered(registered, capfd):
    scoring = load_dag(REPO / "dags" / "ml_batch_scoring.py")
    scored = run(scoring, {"model_name": NAME})
    assert scored.state == "success", scored.states
    assert Path(scored.value("score")["predictions"]).is_file()

    actual = _tamper(registered)
    capfd.readouterr()
    refused = run(scoring, {"model_name": NAME})
    assert refused.states[("score", -1)] == "failed", refused.states
    assert _refusal(registered, actual) in capfd.readouterr().out


def test_an_evaluation_refuses_a_tampered_champion_before_its_job_loads_it(registered, capfd, tmp_path):
    actual = _tamper(registered)
    data = Path(os.environ["AIRFLOW_HOME"], "ml", "data", "model-check", NAME)
    data.mkdir(parents=True, exist_ok=True)
    np.savez(data / "test.npz", X=np.zeros((20, 5), dtype=np.float32), y=np.arange(20) % 2)
    challenger = Path(os.environ["AIRFLOW_HOME"], "ml", "artifacts", "asset-test", NAME, "model.txt")
    capfd.readouterr()
    result = run(load_dag(TEST_DAGS / "ml_model_check_test_dags.py", "evaluate_against_champion"),
                 {"model_name": NAME, "model_path": str(challenger), "test_data": str(data / "test.npz")})
    assert result.states[("evaluate", -1)] == "failed", result.states
    assert _refusal(registered, actual) in capfd.readouterr().out


def test_deploy_refuses_a_model_file_changed_after_its_evaluation(registered):
    """The trained file is overwritten between evaluation and deploy: nothing is registered."""
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_ml_provider.operators.deploy import DeployModelOperator

    registry, name = registered["registry"], f"{NAME}_deploy"
    model = Path(os.environ["AIRFLOW_HOME"], "ml", "artifacts", "model-check", name, "model.txt")
    model.parent.mkdir(parents=True, exist_ok=True)
    _attackers_model(model, seed=2)
    evaluated = hashlib.sha256(model.read_bytes()).hexdigest()
    _attackers_model(model)  # changed after its evaluation
    with registry.mlflow() as mlflow:
        client = mlflow.MlflowClient()
        run_id = client.create_run(registry.experiment_id("model_check_test")).info.run_id
        client.set_terminated(run_id)
    evaluation = {"framework": "lightgbm", "model_path": str(model), "mlflow_run_id": run_id,
                  "metrics": {"accuracy": 0.9}, "n_features": 5, "n_classes": 2,
                  "lineage": {"dag_id": "model_check", "run_id": "r", "model_sha256": evaluated}}
    deploy = DeployModelOperator(task_id="deploy", model_name=name, model_names=["asset_test*"],
                                 evaluation=evaluation, gate={"passed": True, "reasons": []})
    ti = SimpleNamespace(dag_id="model_check", task_id="deploy", try_number=1, run_id="r")
    with pytest.raises(AirflowFailException) as refused:  # a user error: not retried
        deploy.execute({"ti": ti})
    actual = hashlib.sha256(model.read_bytes()).hexdigest()
    assert str(refused.value) == (f"model {name!r} (evaluation run {run_id}): its file {model} has sha256 {actual}, "
                                  f"but {evaluated} was recorded when it was evaluated; refused: the file changed since")
    with registry.mlflow() as mlflow:
        assert mlflow.MlflowClient().search_model_versions(f"name = '{name}'") == []
