"""Inside a job's sandbox: starts the job's workers, says how each ended, and relays its allowed egress.

One sandbox holds all of a job's workers, so that they share one network namespace of their own (their
rendezvous meets on its loopback, which no other job and no host service shares). The launcher, outside,
runs ``python -I -S spawner.py`` as the sandbox's command and init (the standard library only: nothing of the job's
environment is imported; as init it also reaps the orphans of the job's processes, and no signal from inside the
sandbox ends it) and talks to it over two pipes:

- stdin, from the launcher (``marshal``: the launcher is this interpreter, and the trusted side): first the plan,
  ``{"workers": [{"argv", "env", "cwd", "fd", "stdin"?}], "relays": [{"listen": [address, port], "socket": path}],
  "user": uid}``; then ``(worker, signal)`` pairs, signals to send to a worker; its end kills the workers still
  running;
- stdout, to the launcher (JSON lines of integers only: the launcher reads it, and the spawner runs as the job's
  user): ``{"started": n}`` once every worker runs (or ``{"failed": i, "errno": e}`` when one could not start, the
  others then stopped), then ``{"worker": i, "code": c}`` as each ends (``c`` as ``Popen.returncode`` has it:
  negative for a signal).

In a sandbox made by root the spawner starts as root with only the capabilities to change its user: it
listens for the relays, becomes ``user`` (no supplementary group), then starts every worker (``posix_spawn``).
Worker ``i`` writes its output to the inherited descriptor ``fd``, a pipe the launcher reads, and reads
``stdin``, if given, from another (a sharded job's channel to the launcher; else nothing). Each relay
listens on ``address:port`` in the sandbox's network and carries every connection to ``socket``, a Unix
socket the launcher serves outside, which connects on to the one endpoint it stands for: the job reaches
exactly the endpoints the deployment allowed (``egress``), nothing else of the host or the network.

It imports only what every job needs (``socket`` only where there are relays): its start is every job's start.
"""

import marshal
import os
import signal
import sys
import threading

_CHUNK = 65536
_RESET = (signal.SIGPIPE, signal.SIGXFSZ)  # which Python ignores, and a worker must not inherit ignored


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: None)  # a stop's SIGTERM is for the workers; the sandbox ends at SIGKILL
    # Python's handler would raise in here; as the sandbox's init, a signal left at its default is dropped when it
    # comes from inside, so no process of the job can end its sandbox this way (a worker inherits the default)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    control, report = sys.stdin.buffer, sys.stdout
    plan = marshal.load(control)
    for worker in plan["workers"]:  # each worker gets its own descriptors only
        for fd in (worker["fd"], worker.get("stdin")):
            if fd is not None:
                os.set_inheritable(fd, False)
    if plan.get("relays"):
        import socket

        for relay in plan["relays"]:
            listener = socket.create_server((relay["listen"][0], relay["listen"][1]))
            threading.Thread(target=_serve, args=(listener, relay["socket"]), daemon=True).start()
    if (user := plan.get("user")) is not None:  # nothing in the sandbox keeps a privilege, the spawner included
        os.setgroups([])
        os.setgid(user)
        os.setuid(user)
    live: dict[int, int] = {}  # pid -> worker
    for index, worker in enumerate(plan["workers"]):
        try:
            live[_spawn(worker)] = index
        except OSError as exc:
            for pid in live:
                os.kill(pid, signal.SIGKILL)
            _send(report, f'{{"failed": {index}, "errno": {exc.errno or 0}}}')
            return 0
        finally:
            os.close(worker["fd"])
            if "stdin" in worker:
                os.close(worker["stdin"])
    _send(report, f'{{"started": {len(live)}}}')
    lock = threading.Lock()
    threading.Thread(target=_signals, args=(control, live, lock), daemon=True).start()
    while live:
        try:  # one ended, not yet reaped: its pid is still its own
            pid = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT).si_pid
        except ChildProcessError:
            return 0
        with lock:  # (no signal reaches a reaped pid that another process may take)
            _, status = os.waitpid(pid, 0)
            if (index := live.pop(pid, None)) is not None:
                _send(report, f'{{"worker": {index}, "code": {os.waitstatus_to_exitcode(status)}}}')
    return 0


def _spawn(worker: dict) -> int:
    """Start one worker in its cwd, its program found on its own PATH (as ``Popen(env=...)`` finds it)."""
    os.chdir(worker["cwd"])
    stdin = ((os.POSIX_SPAWN_DUP2, worker["stdin"], 0) if "stdin" in worker
             else (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0))
    actions = [stdin, (os.POSIX_SPAWN_DUP2, worker["fd"], 1), (os.POSIX_SPAWN_DUP2, worker["fd"], 2)]
    return os.posix_spawn(_program(worker["argv"][0], worker["env"]), worker["argv"], worker["env"],
                          file_actions=actions, setsigdef=_RESET)


def _program(name: str, env: dict[str, str]) -> str:
    if "/" in name:
        return name
    for directory in os.get_exec_path(env):
        path = os.path.join(directory, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(2, os.strerror(2), name)


def _signals(control, live: dict[int, int], lock: threading.Lock) -> None:
    """Signals from the launcher, until it closes the pipe: the job is over then (the launcher has settled
    it, or died), so a worker still running is killed, and the sandbox, whose end the launcher waits for,
    ends instead of waiting on it."""
    pids = {index: pid for pid, index in live.items()}
    while True:
        try:
            index, signum = marshal.load(control)
        except (EOFError, ValueError, TypeError):
            break
        with lock:
            if (pid := pids.get(index)) in live:
                _kill(pid, signum)
    with lock:
        for pid in live:
            _kill(pid, signal.SIGKILL)


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (OSError, ValueError, OverflowError):
        pass


def _send(report, line: str) -> None:
    report.write(line + "\n")
    report.flush()


def _serve(listener, path: str) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_connect, args=(client, path), daemon=True).start()


def _connect(client, path: str) -> None:
    import socket

    upstream = socket.socket(socket.AF_UNIX)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    pipe(client, upstream)


def pipe(a, b) -> None:
    """Carry bytes both ways between two sockets until either side closes (each direction's end passed on as a
    half-close)."""
    import socket

    def copy(source, sink) -> None:
        try:
            while data := source.recv(_CHUNK):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    other = threading.Thread(target=copy, args=(b, a), daemon=True)
    other.start()
    copy(a, b)
    other.join()
    a.close()
    b.close()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # not Python's shutdown, which would wait on the thread still reading the launcher's pipe
