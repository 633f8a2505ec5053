"""Inside a job's sandbox: starts the job's workers, says how each ended, and relays its allowed egress.

One sandbox holds all of a job's workers, so that they share one network namespace of their own (their
rendezvous meets on its loopback, which no other job and no host service shares). The launcher, outside,
runs ``python -I -S spawner.py`` as the sandbox's command (the standard library only: nothing of the job's
environment is imported) and talks to it over two pipes:

- stdin, from the launcher: first one JSON line, ``{"workers": [{"argv", "env", "cwd", "fd", "stdin"?}], "relays":
  [{"listen": [address, port], "socket": path}], "user": uid}``; then ``{"worker": i, "signal": n}`` lines, signals to
  send to worker ``i``; its end kills the workers still running;
- stdout, to the launcher: ``{"started": n}`` once every worker runs (or ``{"failed": i, "error": text}``
  when one could not start, the others then stopped), then ``{"worker": i, "code": c}`` as each ends
  (``c`` as ``Popen.returncode`` has it: negative for a signal).

In a sandbox made by root the spawner starts as root with only the capabilities to change its user: it
listens for the relays, starts every worker as ``user`` (no supplementary group) and then becomes ``user``
itself. Worker ``i`` writes its output to the inherited descriptor ``fd``, a pipe the launcher reads, and reads
``stdin``, if given, from another (a sharded job's channel to the launcher; else nothing). Each relay
listens on ``address:port`` in the sandbox's network and carries every connection to ``socket``, a Unix
socket the launcher serves outside, which connects on to the one endpoint it stands for: the job reaches
exactly the endpoints the deployment allowed (``egress``), nothing else of the host or the network.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading

_CHUNK = 65536


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: None)  # a stop's SIGTERM is for the workers; the sandbox ends at SIGKILL
    control, report = sys.stdin.buffer, sys.stdout
    plan = json.loads(control.readline())
    for relay in plan.get("relays", []):
        listener = socket.create_server((relay["listen"][0], relay["listen"][1]))
        threading.Thread(target=_serve, args=(listener, relay["socket"]), daemon=True).start()
    user = plan.get("user")
    ids = {} if user is None else {"user": user, "group": user, "extra_groups": []}
    procs = []
    for index, worker in enumerate(plan["workers"]):
        try:
            procs.append(subprocess.Popen(worker["argv"], env=worker["env"], cwd=worker["cwd"], **ids,
                                          stdin=worker.get("stdin", subprocess.DEVNULL), stdout=worker["fd"],
                                          stderr=subprocess.STDOUT))
        except OSError as exc:
            for proc in procs:
                proc.kill()
            _send(report, {"failed": index, "error": exc.strerror or str(exc)})
            return 0
        finally:
            os.close(worker["fd"])
            if "stdin" in worker:
                os.close(worker["stdin"])
    if user is not None:  # the spawner itself becomes the job's user too: nothing in the sandbox keeps a privilege
        os.setgroups([])
        os.setgid(user)
        os.setuid(user)
    _send(report, {"started": len(procs)})
    lock = threading.Lock()
    threading.Thread(target=_signals, args=(control, procs), daemon=True).start()
    waiters = [threading.Thread(target=_wait, args=(index, proc, report, lock)) for index, proc in enumerate(procs)]
    for waiter in waiters:
        waiter.start()
    for waiter in waiters:
        waiter.join()
    return 0


def _wait(index: int, proc: subprocess.Popen, report, lock: threading.Lock) -> None:
    code = proc.wait()
    with lock:
        _send(report, {"worker": index, "code": code})


def _signals(control, procs: list) -> None:
    """Signals from the launcher, until it closes the pipe: the job is over then (the launcher has settled
    it, or died), so a worker still running is killed, and the sandbox, whose end the launcher waits for,
    ends instead of waiting on it."""
    for line in control:
        try:
            order = json.loads(line)
            procs[order["worker"]].send_signal(order["signal"])
        except (ValueError, KeyError, IndexError, OSError):
            continue
    for proc in procs:
        if proc.poll() is None:
            try:
                proc.kill()
            except OSError:
                pass


def _send(report, message: dict) -> None:
    report.write(json.dumps(message) + "\n")
    report.flush()


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_connect, args=(client, path), daemon=True).start()


def _connect(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    pipe(client, upstream)


def pipe(a: socket.socket, b: socket.socket) -> None:
    """Carry bytes both ways until either side closes (each direction's end passed on as a half-close)."""
    def copy(source: socket.socket, sink: socket.socket) -> None:
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
