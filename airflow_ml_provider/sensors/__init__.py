"""Sensors that wait on training jobs."""
