"""Distributed Horovod and LightGBM training as ordinary Airflow tasks, on interchangeable backends."""

__version__ = "0.1.0"
