"""Runs one Horovod rank's argv and records its exit code, which horovodrun does not report per rank.

``python -m airflow_ml_provider.jobs.backends.local_rank EXIT_DIR -- ARGV...``
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    exit_dir, separator, *command = argv
    assert separator == "--", "usage: local_rank EXIT_DIR -- ARGV..."
    rank = os.environ.get("HOROVOD_RANK", "0")
    proc = subprocess.Popen(command)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda sig, _frame: proc.send_signal(sig))
    code = proc.wait()
    code = 128 - code if code < 0 else code  # killed by signal N: the shell convention 128+N
    target = Path(exit_dir) / f"rank-{rank}"
    tmp = target.with_name(f".rank-{rank}.tmp")
    tmp.write_text(str(code))
    os.replace(tmp, target)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
