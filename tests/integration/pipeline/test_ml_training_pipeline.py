"""The shipped pipeline, run for real with dag.test(): local jobs, the real MLflow registry (SQLite).

Champion/challenger: a first model becomes champion; re-running that DAG run registers nothing new;
a better model replaces the champion (and rollback moves the alias back); a Horovod model that does
not beat the champion by the required margin stays challenger. Hostile free text is stored as data.
"""

from __future__ import annotations

import json
import shutil
import uuid
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from airflow.sdk.exceptions import ParamValidationError
from dag_runs import run

from airflow_ml_provider.hooks.model_registry import (
    CHALLENGER,
    CHAMPION,
    PREVIOUS_CHAMPION,
)
from airflow_ml_provider.runtime.splits import file_sha256
from support import TRAINING_IMAGE, needs_horovod

pytestmark = pytest.mark.integration

MODEL = f"ml_training_pipeline.test_{uuid.uuid4().hex[:8]}"  # one of the DAG's own names
FIRST_RUN_DATE = datetime(2026, 1, 1, tzinfo=timezone.utc)
NOTES = "; rm -rf /tmp/aml-pipeline-injection $(touch /tmp/aml-pipeline-injection) `id` {{ 7 * 7 }}"
WEAK = {
    "model_name": MODEL,
    "boost_rounds": 5,
    "gate_metric": "log_loss",
    "min_accuracy": 0.5,
    "notes": NOTES,
}


@pytest.fixture(scope="module")
def first(pipeline):
    Path("/tmp/aml-pipeline-injection").unlink(missing_ok=True)
    return run(pipeline, WEAK, FIRST_RUN_DATE)


def _versions(registry, name: str) -> list[int]:
    with registry.mlflow() as mlflow:
        return sorted(int(v.version) for v in mlflow.MlflowClient().search_model_versions(f"name = '{name}'"))


def test_first_model_is_registered_with_lineage_and_becomes_champion(first, registry):
    assert first.state == "success", first.states
    assert first.states[("train_horovod", -1)] == "skipped"
    _preprocessed_once(first)
    deploy, evaluation = first.value("deploy"), first.value("evaluate")
    assert (deploy["version"], deploy["promoted"], deploy["previous_champion"]) == (1, True, None)
    assert (
        registry.alias_version(MODEL, CHAMPION)["version"]
        == registry.alias_version(MODEL, CHALLENGER)["version"]
        == 1
    )
    # the embedded registry with no MLflow UI served over it ([ml_training] mlflow_ui_url unset): no link, where
    # every one pointed at http://127.0.0.1:5000 before (issue 40)
    assert deploy["url"] == "" and first.value("evaluate")["artifacts_url"] == ""
    assert first.value("deploy", "_link_MLflowModelVersionLink") == ""

    with registry.mlflow() as mlflow:
        client = mlflow.MlflowClient()
        version = client.get_model_version(MODEL, "1")
        tags = version.tags
        assert tags["airflow.dag_id"] == "ml_training_pipeline" and tags["airflow.run_id"] == first.run_id
        assert tags["airflow.data_version"] == first.value("prepare_data", "data_version")
        assert tags["airflow.training_job"] == first.value("train_lightgbm")["job_name"]
        assert tags["airflow.training_backend"] == "local" and tags["airflow.image"] == str(TRAINING_IMAGE)
        # dag.test() runs tasks in this process, not from a bundle checkout (test_bundle_lineage.py does that)
        assert (tags["airflow.bundle_name"], tags["airflow.bundle_version"]) == ("unknown", "unversioned")
        assert first.value("summary")["lineage"] == {key: tags[f"airflow.{key}"] for key in (
            "bundle_name", "bundle_version", "dag_id", "run_id", "data_version", "training_job", "training_backend",
            "image")}
        assert (
            tags["framework"] == "lightgbm"
            and float(tags["metric.accuracy"]) == evaluation["metrics"]["accuracy"]
        )
        assert version.description == NOTES, "free text is stored verbatim, never rendered or executed"
        signature = mlflow.models.get_model_info(f"models:/{MODEL}/1").signature
        assert signature.inputs.inputs[0].shape == (-1, 20) and signature.outputs.inputs[0].shape == (-1, 2)

        run_data = client.get_run(evaluation["mlflow_run_id"]).data
        assert run_data.metrics["accuracy"] == evaluation["metrics"]["accuracy"]
        assert len(client.get_metric_history(evaluation["mlflow_run_id"], "train_loss")) == 5  # one per round
        artifacts = {a.path for a in client.list_artifacts(evaluation["mlflow_run_id"])}
        assert {"training_curve.png", "evaluation_report.md", "metrics.json"} <= artifacts

        champion = mlflow.pyfunc.load_model(f"models:/{MODEL}@{CHAMPION}")
    with np.load(first.value("prepare_data", "test")) as test:
        X, y = test["X"], test["y"]
    probabilities = champion.predict(X)
    accuracy = float(np.mean(probabilities.argmax(axis=1) == y))
    assert probabilities.shape == (len(y), 2) and np.allclose(probabilities.sum(axis=1), 1)
    assert accuracy == pytest.approx(evaluation["metrics"]["accuracy"], abs=1e-6)
    assert not Path("/tmp/aml-pipeline-injection").exists()


def _preprocessed_once(record) -> list[Path]:
    """ONE preprocess task instance (no map index: issue 43) whose one sharded job processed every part (2 train
    parts, test, valid) exactly once: one committed shard per part, each with its part's cleaned file, and the
    data Asset's one event listing every part. Returns the committed shard directories."""
    assert [key for key in record.states if key[0] == "preprocess"] == [("preprocess", -1)]
    assert record.states[("preprocess", -1)] == "success"
    inputs, processed = record.value("prepare_data"), Path(record.value("prepare_data", "processed"))
    assert [Path(path).name for path in inputs] == ["train-00000.npz", "train-00001.npz", "test.npz", "valid.npz"]
    done = record.value("preprocess")
    assert (done["parts"], done["shards"]["shards"], done["shards"]["shards_failed"]) == (4, 4, 0)
    assert done["shards"]["shards_ran"] + done["shards"]["shards_skipped"] == 4
    shards = sorted(processed.glob("shard-*"))
    assert [shard.name for shard in shards] == [f"shard-{i:06d}" for i in range(4)], "one commit per part"
    for shard, source in zip(shards, inputs):
        assert sorted(p.name for p in shard.iterdir()) == ["_COMMITTED", Path(source).name]
        marker = json.loads((shard / "_COMMITTED").read_text())
        assert marker["inputs"] == [source] and marker["parts"][0]["rows_out"] > 0
    assert record.value("prepare_data", "test") == str(shards[2] / "test.npz")
    assert record.value("prepare_data", "valid") == str(shards[3] / "valid.npz")
    return shards


def _data_events(run_id: str) -> list[dict]:
    """The data Asset's events of a DAG run, as Airflow recorded them."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return [event.extra for event in session.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                .filter(AssetModel.name == "ml_training_pipeline.data", AssetEvent.source_run_id == run_id)
                .order_by(AssetEvent.id)]


def test_the_data_asset_gets_one_event_listing_every_part_with_its_lineage(first):
    (event, *_) = _data_events(first.run_id)
    inputs, processed = first.value("prepare_data"), first.value("prepare_data", "processed")
    assert event["data_version"] == first.value("prepare_data", "data_version") and event["parts_total"] == 4
    assert [part["input"] for part in event["parts"]] == inputs
    assert [part["output"] for part in event["parts"]] == [
        f"{processed}/shard-{i:06d}/{Path(path).name}" for i, path in enumerate(inputs)]
    for part in event["parts"]:
        X, y = np.load(part["output"])["X"], np.load(part["output"])["y"]
        assert part["rows"] == len(y) == len(X) > 0 and part["sha256"] == file_sha256(part["output"])
    assert event["rows"] == sum(part["rows"] for part in event["parts"])


def test_every_step_passes_only_small_references_through_xcom(first):
    """What steps hand each other is small; the training view's snapshot of a job (its metric series, last
    lines and timeline, all bounded by the follow core and reporting.live_view) is the view's, not a step's."""
    from airflow_ml_provider.xcom_keys import TRAINING_VIEW

    sizes = {
        f"{task}[{index}].{key}": len(json.dumps(value)) for (task, index, key), value in first.xcom.items()
    }
    views = {name: size for name, size in sizes.items() if name.endswith(f".{TRAINING_VIEW}")}
    assert views and max(views.values()) < 64 * 1024, views
    assert max(size for name, size in sizes.items() if name not in views) < 2048, sizes


def test_rerunning_the_finished_dag_run_retrains_a_new_model_version(first, pipeline, registry):
    """Clear means retrain (issue 25 D3): the training job of this DAG run succeeded, so running the run
    again trains from scratch (all 5 rounds, a new model file), evaluates and registers a new version."""
    shards = _preprocessed_once(first)
    for lost in (shards[1], shards[3]):  # two parts not committed (a job killed before their commit)
        shutil.rmtree(lost)
    again = run(pipeline, WEAK, FIRST_RUN_DATE)
    assert (again.state, again.run_id) == ("success", first.run_id)
    # its preprocessing job ran on the same output: only the two parts not committed ran again, counted
    assert {key: again.value("preprocess")["shards"][key] for key in ("shards_ran", "shards_skipped")} == {
        "shards_ran": 2, "shards_skipped": 2}
    assert [json.loads((shard / "_COMMITTED").read_text())["job"] for shard in shards].count(
        json.loads((shards[1] / "_COMMITTED").read_text())["job"]) == 2, "the second job committed two parts"
    _preprocessed_once(again)
    before, after = first.value("train_lightgbm"), again.value("train_lightgbm")
    assert after["job_name"] == before["job_name"] and "/retrain-1/model/" in after["model_path"]
    assert Path(before["model_path"]).is_file(), "the first model stays"
    evaluation = again.value("evaluate")
    assert evaluation["mlflow_run_id"] != first.value("evaluate")["mlflow_run_id"]
    with registry.mlflow() as mlflow:
        series = mlflow.MlflowClient().get_metric_history(evaluation["mlflow_run_id"], "train_loss")
    assert len(series) == 5, "every round trained again, none resumed"
    assert again.value("deploy")["version"] == 2 and _versions(registry, MODEL) == [1, 2]


def test_a_better_challenger_replaces_the_champion_and_rollback_moves_it_back(first, pipeline, registry):
    held = registry.alias_version(MODEL, CHAMPION)["version"]
    better = run(pipeline, {**WEAK, "boost_rounds": 60, "min_improvement": 0.01, "notes": ""})
    assert better.state == "success", better.states
    gate, deploy = better.value("gate"), better.value("deploy")
    assert gate["passed"] and gate["champion_version"] == held and gate["improvement"] >= 0.01
    assert (deploy["promoted"], deploy["previous_champion"]) == (True, held)
    champion = registry.alias_version(MODEL, CHAMPION)
    assert champion["version"] == deploy["version"] and champion["tags"][PREVIOUS_CHAMPION] == str(held)

    assert registry.rollback(MODEL) == held
    assert registry.alias_version(MODEL, CHAMPION)["version"] == held
    assert registry.alias_version(MODEL, CHALLENGER)["version"] == deploy["version"]


@needs_horovod
def test_a_horovod_challenger_short_of_the_required_margin_is_rejected(first, pipeline, registry):
    before = registry.alias_version(MODEL, CHAMPION)["version"]
    conf = {
        "model_name": MODEL,
        "framework": "horovod",
        "epochs": 2,
        "workers": 1,  # the gate is the point here; two ranks train in tests/integration/runtime and elsewhere
        "gate_metric": "accuracy",
        "min_improvement": 0.5,
        "min_accuracy": 0.5,
    }
    result = run(pipeline, conf)
    assert result.state == "success", result.states
    assert (
        result.states[("train_lightgbm", -1)] == "skipped"
        and result.states[("train_horovod", -1)] == "success"
    )
    gate, deploy = result.value("gate"), result.value("deploy")
    reasons = " ".join(gate["reasons"])
    assert not gate["passed"] and ("less than the required 0.5" in reasons or "the required improvement is 0.5" in reasons)
    assert result.states[("gate", -1)] == "skipped", "a rejection shows in the run (issue 45 D4)"
    assert result.value("evaluate")["champion"]["version"] == before, "the LightGBM champion scored on the same rows"
    assert (deploy["promoted"], deploy["aliases"]) == (False, [])
    assert registry.alias_version(MODEL, CHAMPION)["version"] == before
    assert registry.alias_version(MODEL, CHALLENGER)["version"] < deploy["version"], "a rejected version gets no alias"
    assert (
        result.value("evaluate")["framework"] == "keras"
        and result.value("evaluate")["metrics"]["accuracy"] > 0.5
    )


def test_a_rejected_gate_shows_in_the_run_and_the_summary_offers_nothing_to_load(first, pipeline):
    """Issue 45 D4: a rejection was all green (run, gate, grid: Success) and the summary said "version 5 (), load
    it as models:/..."; now the gate ends skipped, the version is registered for the record, the summary says so."""
    from airflow_ml_provider.reporting.summary import summary_lines

    result = run(pipeline, {"model_name": MODEL, "boost_rounds": 5, "min_accuracy": 1.0})
    assert result.state == "success", result.states
    assert (result.states[("gate", -1)], result.states[("approve", -1)]) == ("skipped", "skipped"), result.states
    assert (result.states[("deploy", -1)], result.states[("summary", -1)]) == ("success", "success"), result.states
    gate, deploy = result.value("gate"), result.value("deploy")
    assert not gate["passed"] and "accuracy = " in gate["reasons"][0] and "below the minimum 1.0" in gate["reasons"][0]
    assert (deploy["promoted"], deploy["aliases"]) == (False, [])
    lines = summary_lines(result.value("summary"))
    assert f"model       {MODEL} version {deploy['version']}: registered for the record, without an alias; the gate " \
        "rejected it, do not serve it" in lines
    assert not any("load it" in line for line in lines), lines


def test_invalid_params_refuse_the_run_before_any_task(pipeline):
    with pytest.raises(ParamValidationError, match="Invalid input for param workers"):
        pipeline.test(run_conf={"workers": "2; rm -rf /"})


def test_deploy_renders_a_kserve_inference_service_for_the_version(first, registry):
    from types import SimpleNamespace

    import yaml

    from airflow_ml_provider.operators.deploy import DeployModelOperator

    deploy = DeployModelOperator(
        task_id="deploy_kserve",
        model_name=MODEL,
        model_names=["ml_training_pipeline.*"],
        evaluation=first.value("evaluate"),
        kserve={"namespace": "models", "min_replicas": 0},
    )
    ti = SimpleNamespace(dag_id="ml_training_pipeline", task_id="deploy_kserve", try_number=1, run_id=first.run_id)
    result = deploy.execute({"ti": ti})
    assert result["version"] == 1 and not result["promoted"], "the first run's version, registered once"
    kserve = result["kserve"]
    assert (kserve["name"], kserve["namespace"], kserve["applied"]) == (
        MODEL.replace("_", "-").replace(".", "-"),
        "models",
        None,
    )
    with registry.mlflow() as mlflow:
        text = mlflow.artifacts.load_text(kserve["manifest_uri"])
    manifest = yaml.safe_load(text)
    assert manifest["kind"] == "InferenceService" and manifest["spec"]["predictor"]["minReplicas"] == 0
    assert manifest["spec"]["predictor"]["model"]["storageUri"] == registry.download_uri(MODEL, 1)
