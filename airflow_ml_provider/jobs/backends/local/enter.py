"""``python -m ...local.enter BOUNDS -- ARGV``: how the launcher starts a job's sandbox.

The process that then becomes the sandbox first enters the job's cgroups and sets its process floor
(``BOUNDS``, a JSON object from ``bounds.Bounds.to_dict``), then execs ``ARGV``: nothing of the job starts
outside its bounds.
"""

from __future__ import annotations

import json
import os
import sys

from airflow_ml_provider.jobs.backends.local.bounds import enter


def main(argv: list[str]) -> int:
    bounds, separator, *command = argv
    if separator != "--" or not command:
        print("usage: enter BOUNDS -- ARGV", file=sys.stderr)
        return 2
    limits = json.loads(bounds)
    enter(limits["paths"], limits["max_processes"])
    os.execvp(command[0], command)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
