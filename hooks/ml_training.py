"""Re-export for deployments that mount this repository as their Airflow home (no logic here)."""

from airflow_ml_provider.hooks.training_backend import TrainingBackendHook

__all__ = ["TrainingBackendHook"]
