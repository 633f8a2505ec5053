"""The provider's connection types. Their names hold no ``_``: a connection type is its URI's scheme, where
RFC 3986 allows none, and Airflow warned on every read of an ``ml_training`` connection. Connections made
with the old names still work, with a deprecation warning that names the new type."""

from __future__ import annotations

import warnings
from typing import Any

from airflow.exceptions import AirflowProviderDeprecationWarning

TRAINING, REGISTRY = "mltraining", "mlregistry"
RENAMED = {"ml_training": TRAINING, "ml_registry": REGISTRY}


def checked(connection: Any) -> Any:
    """``connection``, after warning if its type is an old name."""
    if new := RENAMED.get(connection.conn_type):
        warnings.warn(
            f"connection {connection.conn_id!r}: the connection type {connection.conn_type!r} is deprecated; "
            f"make it {new!r} (a URI: {new}://...), which reads the same fields",
            AirflowProviderDeprecationWarning,
            stacklevel=3,
        )
    return connection
