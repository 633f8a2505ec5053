"""TensorFlow and LightGBM imported as they are where scikit-learn is not installed, a setup both support.

Keras 3 (its scikit-learn wrappers) and LightGBM (its scikit-learn estimator API) import scikit-learn on
import whenever it is installed, as it is in the training image (for the metrics and the example data
sets): 0.7 of the 3.6 CPU s of ``import tensorflow`` and 0.9 of the 1.25 of ``import lightgbm``, in
every rank of every job, for wrappers the trainers never use (measured: docs/testing.md). It is hidden
only while they import; a rank that computes metrics imports scikit-learn afterwards, as usual.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def sklearn_hidden() -> Iterator[None]:
    """Run the block (an import) as if scikit-learn were not installed: ``import sklearn`` raises
    ModuleNotFoundError, which Keras and LightGBM catch. Nothing changes where it is already imported."""
    if "sklearn" in sys.modules:
        yield
        return
    sys.modules["sklearn"] = None  # Python's own marker for "not importable"
    try:
        yield
    finally:
        del sys.modules["sklearn"]
