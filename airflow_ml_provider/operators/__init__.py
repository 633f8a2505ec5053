"""Airflow tasks: thin, templated, deferrable, cleaning up on kill."""
