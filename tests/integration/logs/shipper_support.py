"""The Filebeat stand-in lives in tools/, outside the library: the tests import it from there."""

from __future__ import annotations

import sys
from pathlib import Path

SHIPPER = Path(__file__).resolve().parents[3] / "tools" / "filebeat_shipper.py"
if str(SHIPPER.parent) not in sys.path:
    sys.path.insert(0, str(SHIPPER.parent))

from filebeat_shipper import ship  # noqa: E402

__all__ = ["SHIPPER", "ship"]
