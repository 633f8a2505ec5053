"""Preprocessing as ONE sharded job (issue 43) with the real PreprocessOperator: ``parts`` generated files, each a
shard, cleaned by 2 workers, each part at least ``delay`` seconds (tests/fixtures/shards/slow_preprocess.py), so
that a test can kill the job's launcher mid-run."""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import DAG, task

from airflow_ml_provider.assets import data_asset
from airflow_ml_provider.operators.preprocess import PreprocessOperator

SLOW = str(Path(__file__).resolve().parents[1] / "fixtures" / "shards" / "slow_preprocess.py")

with DAG("ml_preprocess_sharded_test", schedule=None, params={"parts": 12, "delay": 0.4}) as preprocess_sharded:

    @task
    def raw_parts(params: dict, run_id: str, ti=None) -> list[str]:
        """``parts`` files of 50 rows (row r of part p: features p*1000+r, a NaN in every 10th row) in the run's
        data folder; where the job commits them is pushed as ``processed``."""
        import numpy as np

        from airflow_ml_provider.hooks.training_backend import TrainingBackendHook

        out = TrainingBackendHook().run_data_dir("ml_preprocess_sharded_test", run_id)
        paths = []
        for part in range(params["parts"]):
            X = np.full((50, 3), part * 1000.0) + np.arange(50)[:, None]
            X[::10, 0] = np.nan
            path = out / "raw" / f"part-{part:05d}.npz"
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("wb") as f:
                np.savez(f, X=X, y=np.arange(50) % 2)
            paths.append(str(path))
        ti.xcom_push("processed", str(out / "processed"))
        return paths

    parts = raw_parts()
    PreprocessOperator(task_id="preprocess", inputs=parts, output_dir=parts["processed"], workers=2,
                       command=["python", SLOW, "{{ params.delay }}"], outlets=[data_asset("ml_preprocess_test")],
                       data_version="feedface")
