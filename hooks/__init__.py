"""Thin re-exports of airflow_ml_provider classes."""
