"""The gate a Horovod launcher pod passes before ``horovodrun``: every worker's sshd answers, then the launch.

``python -m airflow_ml_provider.runtime.ssh_gate [--port 22] [--wait-s S] HOST[:SLOTS],... -- ARGV...`` waits
until each host accepts a TCP connection on the port (a name not yet in DNS is retried too), then replaces
itself with ``ARGV``, so a signal to the pod reaches horovodrun.

Why: horovodrun checks ssh to every host once, with five attempts back to back and no pause between them
(Horovod 0.28.1 ``runner/launch.py``, ``SSH_ATTEMPTS`` and ``_check_all_hosts_ssh_successful``), and fails the
job when one is refused. A Volcano job starts its master with its workers (its ``dependsOn`` cannot be used:
Volcano's own design note says it conflicts with gang scheduling, docs/design/task-launch-order-within-job.md),
so the master's first ssh raced the workers' sshd start: "ssh not successful for host <job>-worker-1.<job>".
Only the standard library: any image that holds this package runs it.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

WAIT_S = 600.0  # a worker pod may be placed, or its image pulled, minutes after the master's


def wait_for_hosts(hosts: list[str], port: int, wait_s: float = WAIT_S) -> None:
    """Return once every host accepts a connection on ``port``; TimeoutError naming those that never did."""
    deadline = time.monotonic() + wait_s
    waiting = {host: "not tried" for host in hosts}
    while True:
        for host in list(waiting):
            try:
                socket.create_connection((host, port), timeout=5).close()
                del waiting[host]
            except OSError as exc:
                waiting[host] = str(exc)
        if not waiting:
            return
        if time.monotonic() >= deadline:
            told = "; ".join(f"{host}: {why}" for host, why in sorted(waiting.items()))
            raise TimeoutError(f"sshd on port {port} did not answer in {wait_s:g} s: {told}")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_ml_provider.runtime.ssh_gate")
    parser.add_argument("--port", type=int, default=22)
    parser.add_argument("--wait-s", type=float, default=WAIT_S)
    parser.add_argument("hosts", help="the workers, as horovodrun's -H takes them: HOST[:SLOTS],...")
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the command to run once they answer")
    args = parser.parse_args(argv)
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not command:
        parser.error("no command after '--'")
    hosts = [entry.rsplit(":", 1)[0] for entry in args.hosts.split(",") if entry]
    try:
        wait_for_hosts(hosts, args.port, args.wait_s)
    except TimeoutError as exc:
        print(f"ssh_gate: {exc}", file=sys.stderr, flush=True)
        return 3
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
