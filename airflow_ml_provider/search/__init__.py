"""Hyperparameter search: Optuna samplers and pruners drive trials that run as training jobs on a backend.

Airflow-free (like ``jobs/``, which it runs trials on): the operator in ``operators/search.py`` only wires it up.
"""
