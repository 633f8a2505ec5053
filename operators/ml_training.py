"""Re-export for deployments that mount this repository as their Airflow home (no logic here)."""

from airflow_ml_provider.operators.training import (
    BaseTrainingOperator,
    HorovodTrainingOperator,
    LightGBMTrainingOperator,
    OnFinish,
    TrainingJobFailed,
    TrainingJobOperator,
)

__all__ = [
    "BaseTrainingOperator",
    "HorovodTrainingOperator",
    "LightGBMTrainingOperator",
    "OnFinish",
    "TrainingJobFailed",
    "TrainingJobOperator",
]
