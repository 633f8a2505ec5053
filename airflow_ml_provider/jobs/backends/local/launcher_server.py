"""A warm launcher: one process per backend root that has imported the launcher and forks one for each job.

A launcher's interpreter and imports are ~45 ms of every job's start (1 % of a 4 s Horovod job); the server pays
them once. ``LocalBackend.submit`` asks it over a Unix socket in the root (0700; a peer of another user is refused),
handing it the job's directory, the launcher's environment and two descriptors: the pipe the job's secrets come
on and ``launcher.log``. The server forks; the child is what a cold start would have made (a session of its own,
that environment, stdin the secrets' pipe, stdout and stderr the log, cwd the job's directory) and runs
``launcher.main``; the server answers with its pid. No secret passes through the server, and it has no thread, so
the fork copies no lock held elsewhere.

The server ends when it has been idle for ``IDLE_S``, when its socket is no longer in the root (the root was
removed, or another server took its place), or when a module it imported changed on disk (an upgrade): it then
answers ``stale`` and the submitter starts a fresh one. The kernel reaps its children (SIGCHLD ignored): a
launcher never lingers as its zombie, and its followers wait on it by pidfd, which needs no parent.

    python -m airflow_ml_provider.jobs.backends.local.launcher_server ROOT [--idle-s SECONDS]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from airflow_ml_provider.jobs.backends.local.common import JOB_UID_ENV

IDLE_S = 60.0  # idle servers go: a root's first job after a quiet minute pays one cold start (~50 ms)
_CHECK_S = 5.0  # how often an idle server looks at its socket
_ANSWER_S = 30.0  # the most a submitter waits for the server's answer, or for a new server to be ready
_MAX_REQUEST = 1 << 16  # a job's directory and an allow-listed environment
_STALE = b'{"stale": true}'  # nothing was forked: ask a fresh server
_SERVER = "airflow_ml_provider.jobs.backends.local.launcher_server"
SERVER_NAME, LAUNCHER_NAME = "ml-launcher-srv", "ml-launcher"  # their names in ps (at most 15 characters)
_PACKAGE = "airflow_ml_provider"


class ServerError(OSError):
    """No launcher could be had from the root's server (its reason, or where its log is)."""


def start_launcher(root: Path, job_dir: Path, env: dict[str, str], stdin: int, log: int) -> int:
    """The pid of a new launcher for ``job_dir`` with ``env``, forked by ``root``'s server (started first if none
    answers), its stdin ``stdin`` and its output ``log``. ServerError if none can be had; a request the server may
    have received is never sent twice (two launchers of one job)."""
    request = json.dumps({"job_dir": str(job_dir), "env": env}).encode()
    for _ in range(2):
        if (pid := _ask(root, request, [stdin, log])) is not None:
            return pid
        # none listened, or it was stale (it forked nothing); the server has no job's marker (cancel finds by it)
        _start_server(root, {name: value for name, value in env.items() if name != JOB_UID_ENV})
    raise ServerError(f"the launcher server of {root} did not answer; see {_log_path(root)}")


def _socket_name(root: Path) -> str:
    """The server's socket in ``root``, named for this interpreter and package (another venv gets its own)."""
    key = hashlib.sha256(f"{sys.executable}\0{Path(__file__).resolve().parents[3]}".encode()).hexdigest()[:12]
    return f"launcher-{key}.sock"


def _log_path(root: Path) -> Path:
    return root / "launcher-server.log"


def _ask(root: Path, request: bytes, fds: list[int]) -> int | None:
    """The pid the server forked for ``request``, or None where no server took it (nothing to connect to, stale)."""
    try:
        conn = _connect(root)
    except (FileNotFoundError, ConnectionRefusedError):
        return None
    with conn:
        conn.settimeout(_ANSWER_S)
        try:
            socket.send_fds(conn, [request], fds)
            answer = json.loads(conn.recv(4096))
            if answer.get("stale"):
                return None
            return int(answer["pid"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            # it may have forked: asking again could start the job twice
            raise ServerError(f"the launcher server of {root} failed to answer ({type(exc).__name__}: {exc}); "
                              f"see {_log_path(root)}") from None


def _connect(root: Path) -> socket.socket:
    """A socket connected to ``root``'s server, through the root's descriptor (a socket's path is at most 107
    bytes; the root's may be longer)."""
    dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(f"/proc/self/fd/{dir_fd}/{_socket_name(root)}")
    except BaseException:
        conn.close()
        raise
    finally:
        os.close(dir_fd)
    return conn


def _start_server(root: Path, env: dict[str, str]) -> None:
    """Start ``root``'s server unless another submitter just did; return once it listens."""
    with open(root / "launcher-server.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one submitter starts it; the others find it listening
        if _listening(root):
            return
        with open(_log_path(root), "a") as log:
            os.fchmod(log.fileno(), 0o600)
            server = subprocess.Popen([sys.executable, "-m", _SERVER, str(root)], env=env, cwd="/",
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                      start_new_session=True)
        try:
            ready = _read_line(server.stdout, _ANSWER_S)
        finally:
            server.stdout.close()
        if ready != b"ready\n":  # (one stuck past the wait is stopped, not waited for)
            server.kill()
        server.wait()  # (it forks the server proper and exits: the server is nobody's child here)
        if ready != b"ready\n":
            raise ServerError(f"the launcher server of {root} did not start (exit {server.returncode}); see "
                              f"{_log_path(root)}")


def _listening(root: Path) -> bool:
    try:
        _connect(root).close()
        return True
    except OSError:
        return False


def _read_line(stream, timeout: float) -> bytes:
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        return stream.readline() if selector.select(timeout) else b""


# -- the server -------------------------------------------------------------------------------------------------


def serve(root: Path, idle_s: float) -> None:
    from airflow_ml_provider.jobs.backends.local import launcher  # what every launcher imports, imported once

    sources = _sources()
    dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    name, tmp = _socket_name(root), f".launcher-server.{os.getpid()}.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(f"/proc/self/fd/{dir_fd}/{tmp}")
    os.chmod(tmp, 0o600, dir_fd=dir_fd)
    listener.listen(64)
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # in place of a dead server's, atomically
    mine = _identity(dir_fd, name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the launchers
    if os.fork():  # the starter's child exits once the server listens: the server is nobody's child
        os._exit(0)
    os.setsid()
    _call_me(SERVER_NAME)
    sys.stdout.buffer.write(b"ready\n")
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    listener.settimeout(_CHECK_S)
    last = time.monotonic()
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if time.monotonic() - last >= idle_s or _identity(dir_fd, name) != mine:
                break
            continue
        last = time.monotonic()
        with conn:
            if not _serve_one(conn, listener, dir_fd, launcher.main, sources):  # stale: no longer reachable, then told
                _stop_listening(listener, dir_fd, name, mine)
                with contextlib.suppress(OSError):
                    conn.sendall(_STALE)
                return
    _stop_listening(listener, dir_fd, name, mine)


def _stop_listening(listener: socket.socket, dir_fd: int, name: str, mine: tuple[int, int] | None) -> None:
    """The name goes first (no submitter connects after it); those already connected are told ``stale`` (nothing
    was forked for them: they start a fresh server)."""
    if _identity(dir_fd, name) == mine:
        os.unlink(name, dir_fd=dir_fd)
    listener.setblocking(False)
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return
        with conn, contextlib.suppress(OSError):
            conn.sendall(_STALE)


def _serve_one(conn: socket.socket, listener: socket.socket, dir_fd: int, main, sources: dict) -> bool:
    """Fork a launcher for one request; False, answering nothing, once the server's code is stale (it ends)."""
    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    if uid != os.getuid():
        print(f"refused a request from uid {uid}", file=sys.stderr, flush=True)
        return True
    conn.settimeout(_ANSWER_S)
    try:
        message, fds, _flags, _address = socket.recv_fds(conn, _MAX_REQUEST, 2)
    except OSError:
        return True
    try:
        if len(fds) != 2:
            return True
        if _sources() != sources:
            return False
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            _become_launcher(main, request, fds, [conn, listener], dir_fd)
        conn.sendall(json.dumps({"pid": pid}).encode())
        return True
    except (OSError, ValueError) as exc:
        print(f"a request failed: {exc}", file=sys.stderr, flush=True)
        return True
    finally:
        for fd in fds:
            os.close(fd)


def _become_launcher(main, request: dict, fds: list[int], sockets: list[socket.socket], dir_fd: int) -> None:
    """In the forked child: become the job's launcher, as a cold start would have made it, and run it."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for server_socket in sockets:  # the server's: a launcher holding the listener would keep it reachable
            server_socket.close()
        os.close(dir_fd)
        os.setsid()
        _call_me(LAUNCHER_NAME)
        stdin, log = fds
        os.dup2(stdin, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(stdin)
        os.close(log)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["job_dir"])
        code = main(Path(request["job_dir"]))
    except BaseException:  # noqa: BLE001 - whatever stops it is in launcher.log; its job reads as PREEMPTED
        import traceback

        with contextlib.suppress(OSError):
            traceback.print_exc()
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)  # never back into the server's loop


def _call_me(name: str) -> None:
    """This process's name in ``ps``/``top`` (its command line stays the server's, as a fork's does)."""
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
        comm.write(name)


def _sources() -> dict[str, tuple[int, int]]:
    """Every module of the package this server has imported, by (mtime, size): a change is an upgrade."""
    found = {}
    for module in list(sys.modules.values()):
        path, spec = getattr(module, "__file__", None), getattr(module, "__spec__", None)
        if path and (spec.name if spec else module.__name__).split(".")[0] == _PACKAGE:  # (this one is __main__)
            try:
                stat = os.stat(path)
                found[path] = (stat.st_mtime_ns, stat.st_size)
            except OSError:
                found[path] = (0, -1)
    return found


def _identity(dir_fd: int, name: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return stat.st_dev, stat.st_ino
    except OSError:
        return None


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog=f"python -m {_SERVER}")
    parser.add_argument("root", type=Path)
    parser.add_argument("--idle-s", type=float, default=IDLE_S)
    arguments = parser.parse_args()
    serve(arguments.root, arguments.idle_s)
    os._exit(0)
