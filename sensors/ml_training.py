"""Re-export for deployments that mount this repository as their Airflow home (no logic here)."""

from airflow_ml_provider.sensors.elasticsearch_log import ElasticsearchLogSensor
from airflow_ml_provider.sensors.training_job import TrainingJobSensor

__all__ = ["TrainingJobSensor", "ElasticsearchLogSensor"]
