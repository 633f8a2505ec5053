"""``python -I -S enter.py MAX_PROCESSES [CGROUP_DIR ...] -- ARGV``: how the launcher starts a job's sandbox (the
standard library only, without site-packages, and no json: it runs before every job, and each import is
milliseconds of every job's start).

The process that then becomes the sandbox first enters the job's cgroups (the directories ``bounds.create``
made) and sets its process floor, then execs ``ARGV``: nothing of the job starts outside its bounds.
"""

import os
import resource
import sys


def enter(directories: list, max_processes: int) -> None:
    """Put this process in the job's cgroups and set its process floor (RLIMIT_NPROC)."""
    for directory in directories:
        with open(os.path.join(directory, "cgroup.procs"), "w") as handle:
            handle.write(str(os.getpid()))
    resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))


def main(argv: list) -> int:
    if "--" not in argv or argv.index("--") < 1 or argv.index("--") == len(argv) - 1:
        print("usage: enter.py MAX_PROCESSES [CGROUP_DIR ...] -- ARGV", file=sys.stderr)
        return 2
    split = argv.index("--")
    max_processes, *directories = argv[:split]
    enter(directories, int(max_processes))
    command = argv[split + 1:]
    os.execvp(command[0], command)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
