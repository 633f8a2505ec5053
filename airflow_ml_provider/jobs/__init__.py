"""Airflow-free core: job specs, normalized states and the backends that run jobs."""
