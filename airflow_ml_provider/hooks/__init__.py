"""Connections and clients."""
