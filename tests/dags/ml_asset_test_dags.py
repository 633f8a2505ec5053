"""A minimal producer of the training pipeline's model Asset: a tiny LightGBM model trained in the task,
recorded as an MLflow run, then the real DeployModelOperator (gate passed) with the pipeline's Asset as
its outlet, as dags/ml_training_pipeline.py has it; and one real PreprocessOperator job with a data Asset."""

from __future__ import annotations

from airflow.sdk import DAG, task

from airflow_ml_provider.assets import data_asset, model_asset
from airflow_ml_provider.operators.deploy import DeployModelOperator
from airflow_ml_provider.operators.preprocess import PreprocessOperator

with DAG("ml_asset_producer_test", schedule=None, params={"model_name": "asset_test", "gate_passed": True}) as (
    asset_producer
):

    @task
    def raw_data(params: dict) -> dict:
        import os
        from pathlib import Path

        import numpy as np

        folder = Path(os.environ["AIRFLOW_HOME"], "ml", "data", "asset-test", params["model_name"])
        folder.mkdir(parents=True, exist_ok=True)
        np.savez(folder / "raw.npz", X=np.arange(20, dtype=np.float32).reshape(10, 2), y=np.arange(10) % 2)
        return {"input_path": str(folder / "raw.npz"), "output_path": str(folder / "processed.npz")}

    PreprocessOperator.partial(
        task_id="preprocess", outlets=[data_asset("ml_asset_producer_test")], data_version="feedface"
    ).expand_kwargs([raw_data()])

    @task
    def evaluation(params: dict, run_id: str) -> dict:
        import hashlib
        import os
        from pathlib import Path

        import lightgbm as lgb
        import numpy as np

        from airflow_ml_provider.hooks.model_registry import ModelRegistryHook

        rng = np.random.default_rng(0)
        X = rng.normal(size=(400, 5)).astype(np.float32)
        y = (X[:, 0] + X[:, 1] > 0).astype(int)
        model = Path(os.environ["AIRFLOW_HOME"], "ml", "artifacts", "asset-test", params["model_name"], "model.txt")
        model.parent.mkdir(parents=True, exist_ok=True)
        lgb.train({"objective": "binary", "verbosity": -1, "num_threads": 1}, lgb.Dataset(X, y), 5).save_model(model)
        registry = ModelRegistryHook()
        with registry.mlflow() as mlflow:
            client = mlflow.MlflowClient()
            run = client.create_run(registry.experiment_id("asset_test"))
            client.log_metric(run.info.run_id, "accuracy", 0.9)
            client.set_terminated(run.info.run_id)
        return {
            "framework": "lightgbm", "model_path": str(model), "mlflow_run_id": run.info.run_id,
            "metrics": {"accuracy": 0.9}, "n_features": 5, "n_classes": 2,
            "lineage": {"dag_id": "ml_asset_producer_test", "run_id": run_id, "data_version": "feedface",
                        "model_sha256": hashlib.sha256(model.read_bytes()).hexdigest()},  # as runtime.evaluate reports
        }

    @task
    def gate(params: dict) -> dict:
        return {"passed": params["gate_passed"], "reasons": ["test"]}

    DeployModelOperator(
        task_id="deploy",
        model_name="{{ params.model_name }}",
        model_names=["asset_test*"],
        evaluation=evaluation(),
        gate=gate(),
        outlets=[model_asset("ml_training_pipeline")],
    )
