"""What a pipeline run tells people and the registry: the run summary, MLflow output, model lineage tags,
notifications. Airflow-side helpers of the operators, not operators themselves."""
