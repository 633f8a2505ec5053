"""``python -I -S enter.py BOUNDS -- ARGV``: how the launcher starts a job's sandbox (the standard library only,
without site-packages: it runs before every job).

The process that then becomes the sandbox first enters the job's cgroups and sets its process floor
(``BOUNDS``, a JSON object from ``bounds.Bounds.to_dict``), then execs ``ARGV``: nothing of the job starts
outside its bounds.
"""

import json
import os
import resource
import sys


def enter(paths: dict, max_processes: int) -> None:
    """Put this process in the job's cgroups (``bounds.create`` made them) and set its process floor."""
    for directory in sorted(set(paths.values())):
        with open(os.path.join(directory, "cgroup.procs"), "w") as handle:
            handle.write(str(os.getpid()))
    resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))


def main(argv: list) -> int:
    bounds, separator, *command = argv
    if separator != "--" or not command:
        print("usage: enter.py BOUNDS -- ARGV", file=sys.stderr)
        return 2
    limits = json.loads(bounds)
    enter(limits["paths"], limits["max_processes"])
    os.execvp(command[0], command)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
