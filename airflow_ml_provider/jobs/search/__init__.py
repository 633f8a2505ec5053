"""Hyperparameter search: Optuna samplers and pruners drive trials that run as training jobs on a backend.

Airflow-free, like the rest of ``jobs/``: the operator in ``operators/search.py`` only wires it up.
"""
