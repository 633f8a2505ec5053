"""What a pipeline run tells people and the registry: the run summary, MLflow output, model lineage tags,
notifications, and the live view of a followed job (which triggers save too). Airflow-side helpers of the
operators and triggers, not operators themselves."""
