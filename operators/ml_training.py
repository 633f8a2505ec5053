"""Re-export for deployments that mount this repository as their Airflow home (no logic here)."""

from airflow_ml_provider.operators.deploy import DeployModelOperator
from airflow_ml_provider.operators.evaluate import EvaluateModelOperator
from airflow_ml_provider.operators.gate import ModelGateOperator
from airflow_ml_provider.operators.parameter_server import ParameterServerTrainingOperator
from airflow_ml_provider.operators.preprocess import PreprocessOperator
from airflow_ml_provider.operators.recipe import RecipeTrialOperator
from airflow_ml_provider.operators.scoring import BatchScoringOperator
from airflow_ml_provider.operators.search import HyperparameterSearchOperator
from airflow_ml_provider.operators.training import (
    BaseTrainingOperator,
    HorovodTrainingOperator,
    LightGBMTrainingOperator,
    OnFinish,
    PyTorchTrainingOperator,
    TrainingJobFailed,
    TrainingJobOperator,
    XGBoostTrainingOperator,
)

__all__ = [
    "BaseTrainingOperator",
    "BatchScoringOperator",
    "DeployModelOperator",
    "EvaluateModelOperator",
    "HorovodTrainingOperator",
    "HyperparameterSearchOperator",
    "LightGBMTrainingOperator",
    "ModelGateOperator",
    "OnFinish",
    "ParameterServerTrainingOperator",
    "PreprocessOperator",
    "PyTorchTrainingOperator",
    "RecipeTrialOperator",
    "TrainingJobFailed",
    "TrainingJobOperator",
    "XGBoostTrainingOperator",
]
