"""Re-export for deployments that mount this repository as their Airflow home (no logic here)."""

from airflow_ml_provider.hooks.elasticsearch_logs import ElasticsearchLogsHook
from airflow_ml_provider.hooks.model_registry import ModelRegistryHook
from airflow_ml_provider.hooks.training_backend import TrainingBackendHook

__all__ = ["TrainingBackendHook", "ElasticsearchLogsHook", "ModelRegistryHook"]
