"""TensorFlow's start-up noise kept out of the job's log.

Importing TensorFlow 2.21 writes, from C++ and before any log level applies, an absl notice, the
oneDNN notice (twice) and the CPU-instructions notice: most of a short job's log, printed by every
rank. ``quiet_startup()`` sets ``TF_CPP_MIN_LOG_LEVEL=1`` (C++ INFO off; warnings and errors stay)
unless already set, and drops exactly those notices from what the block writes to stderr; any other
line goes through. ``AIRFLOW_ML_TF_STARTUP_LOGS=1`` (e.g. in the job's ``env``) shows everything.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

SHOW = "AIRFLOW_ML_TF_STARTUP_LOGS"
NOISE = re.compile(
    r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$"
    r"|^I\d{4} [\d:.]+\s+\d+ (?:port|cpu_feature_guard)\.cc:\d+\] "
    r"|^To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags\.$"
)


@contextmanager
def quiet_startup() -> Iterator[None]:
    """Run the block (the TensorFlow imports) with its start-up notices filtered out of stderr."""
    if os.environ.get(SHOW) == "1":
        yield
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [
                line
                for line in captured.read().decode(errors="replace").splitlines()
                if not NOISE.match(line)
            ]
            if kept:
                sys.stderr.write("\n".join(kept) + "\n")
                sys.stderr.flush()
