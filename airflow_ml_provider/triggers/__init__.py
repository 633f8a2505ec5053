"""Async waiting in the triggerer."""
