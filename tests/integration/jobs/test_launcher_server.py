"""The warm launcher (jobs/backends/local/launcher_server.py) with real processes: one server per backend root forks
every job's launcher, each with its own submission's environment; a stale, killed, idle or orphaned server is
replaced or ends; another user's request is refused; a cancel still finds a forked launcher."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import psutil
import pytest

from airflow_ml_provider.jobs.backends.local import launcher_server
from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState
from support import TRAINING_IMAGE, final_status, job_log, wait_for

pytestmark = pytest.mark.integration

PRINT_TZ_THEN_WAIT = ["python", "-c", "import os, time; print('tz', os.environ.get('TZ'), flush=True); "
                                      "time.sleep(float(os.environ.get('WAIT_S', '1')))"]


@pytest.fixture
def backend(tmp_path) -> LocalBackend:
    return LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=5)


def job(seconds: float = 1.0) -> TrainingJobSpec:
    return TrainingJobSpec(framework="generic", command=PRINT_TZ_THEN_WAIT, num_workers=1, env={"WAIT_S": str(seconds)})


def launcher_of(backend: LocalBackend, name: str) -> psutil.Process:
    record = json.loads((backend.job_dir(name) / "launcher.json").read_text())
    return psutil.Process(record["pid"])


def server_of(backend: LocalBackend, name: str) -> psutil.Process:
    """The server that forked the job's launcher (read while the launcher runs)."""
    server = launcher_of(backend, name).parent()
    assert server is not None and launcher_server._SERVER in " ".join(server.cmdline())
    return server


def test_one_server_forks_every_launcher_of_a_root_each_with_its_own_submissions_environment(backend, monkeypatch):
    monkeypatch.setenv("TZ", "Etc/GMT+1")
    backend.submit("first", job(3), {})
    first_server = server_of(backend, "first")
    monkeypatch.setenv("TZ", "Etc/GMT+2")  # a later submitter's environment, not the server's
    backend.submit("second", job(3), {})
    assert server_of(backend, "second").pid == first_server.pid
    assert launcher_of(backend, "second").pid != launcher_of(backend, "first").pid
    # told apart in ps, though a fork keeps the server's command line (the launcher names itself once it runs)
    assert first_server.name() == launcher_server.SERVER_NAME
    wait_for(lambda: launcher_of(backend, "second").name() == launcher_server.LAUNCHER_NAME, what="the launcher's name")
    for name, tz in (("first", "Etc/GMT+1"), ("second", "Etc/GMT+2")):
        assert final_status(backend, name).state is JobState.SUCCEEDED, job_log(backend, name)
        assert f"[rank 0] tz {tz}" in job_log(backend, name)
    # the server carries no job's marker: cancelling a job never finds it (nor the launchers it forks)
    assert "AIRFLOW_ML_JOB_UID" not in first_server.environ()
    assert first_server.is_running()


def test_a_cancel_stops_a_forked_launcher_and_its_workers(backend):
    backend.submit("long", job(600), {})
    wait_for(lambda: "tz" in job_log(backend, "long"), what="the worker's first line")
    launcher = launcher_of(backend, "long")
    workers = launcher.children(recursive=True)
    backend.cancel("long")
    assert final_status(backend, "long").state is JobState.CANCELLED
    for proc in (launcher, *workers):
        assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE


def test_a_changed_module_makes_the_server_stale_and_the_next_job_gets_a_fresh_one(backend):
    backend.submit("before", job(2), {})
    old = server_of(backend, "before")
    source = Path(launcher_server.__file__)
    stat = source.stat()
    try:  # an upgrade in place: one of the server's modules changes on disk
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        backend.submit("after", job(2), {})
        fresh = server_of(backend, "after")
    finally:
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert fresh.pid != old.pid
    old.wait(timeout=30)  # the stale one answered "stale" and ended
    for name in ("before", "after"):  # the first job's launcher, forked by the stale server, ran on
        assert final_status(backend, name).state is JobState.SUCCEEDED, job_log(backend, name)


def test_a_killed_server_leaves_its_launchers_running_and_the_next_job_gets_a_fresh_one(backend):
    backend.submit("running", job(3), {})
    old = server_of(backend, "running")
    old.send_signal(signal.SIGKILL)
    old.wait(timeout=30)
    backend.submit("next", job(1), {})  # its socket is still there, with nobody listening
    assert server_of(backend, "next").pid != old.pid
    for name in ("running", "next"):
        assert final_status(backend, name).state is JobState.SUCCEEDED, job_log(backend, name)


def test_concurrent_first_submissions_start_one_server(backend):
    names = [f"job-{n}" for n in range(4)]
    errors: list[BaseException] = []

    def submit(name: str) -> None:  # (each job runs long enough to be asked for its launcher's parent afterwards)
        try:
            backend.submit(name, job(10), {})
        except BaseException as exc:  # noqa: BLE001 - the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=submit, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors  # (the root's owner key, made by the first of them, was once a race between threads)
    assert len({server_of(backend, name).pid for name in names}) == 1
    for name in names:
        assert final_status(backend, name).state is JobState.SUCCEEDED, job_log(backend, name)


def serve(root: Path, idle_s: float) -> subprocess.Popen:
    """A server started by hand, as ``start_launcher`` starts one; returns the starter (which exits once it
    listens) after reading its ready line."""
    with open(root / "launcher-server.log", "a") as log:
        starter = subprocess.Popen([sys.executable, "-m", launcher_server._SERVER, str(root), "--idle-s", str(idle_s)],
                                   stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    assert starter.stdout.readline() == b"ready\n"
    starter.wait(timeout=30)
    return starter


def the_server(root: Path) -> psutil.Process:
    [server] = [proc for proc in psutil.process_iter(["cmdline"])
                if launcher_server._SERVER in " ".join(proc.info["cmdline"] or []) and str(root) in proc.info["cmdline"]]
    return server


def test_an_idle_server_ends_and_takes_its_socket_with_it(tmp_path):
    root = tmp_path / "ml"
    root.mkdir(mode=0o700)
    serve(root, idle_s=0.1)
    server = the_server(root)
    socket_path = root / launcher_server._socket_name(root)
    assert socket_path.exists()
    server.wait(timeout=30)  # idle past 0.1 s at its next look (every 5 s)
    assert not socket_path.exists()


def test_a_server_whose_socket_is_gone_ends(tmp_path):
    root = tmp_path / "ml"
    root.mkdir(mode=0o700)
    serve(root, idle_s=600)
    server = the_server(root)
    (root / launcher_server._socket_name(root)).unlink()  # the root was cleaned up, or another server took over
    server.wait(timeout=30)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a request as another user")
def test_a_request_from_another_user_is_refused_and_forks_nothing():
    base = Path(tempfile.mkdtemp(prefix="launcher-server-"))  # (not under tmp_path: another user must reach it)
    root = base / "ml"
    root.mkdir()
    serve(root, idle_s=600)
    server = the_server(root)
    try:
        for path in (base, root):
            os.chmod(path, 0o755)  # (only for this test: reachable by another user, as a mistaken root would be)
        os.chmod(root / launcher_server._socket_name(root), 0o666)
        request = [sys.executable, "-c", (
            "import json, os, sys; from pathlib import Path; "
            "from airflow_ml_provider.jobs.backends.local import launcher_server as s; "
            "os.setgid(65534); os.setuid(65534); r, w = os.pipe(); "
            "print(s._ask(Path(sys.argv[1]), json.dumps({'job_dir': '/', 'env': {}}).encode(), [r, w]))"), str(root)]
        answer = subprocess.run(request, capture_output=True, text=True, timeout=60)
        assert "failed to answer" in answer.stderr, answer.stderr  # closed without an answer
        assert server.children() == []
        assert "refused a request from uid 65534" in (root / "launcher-server.log").read_text()
        assert server.is_running()
    finally:
        server.kill()
        shutil.rmtree(base)


def test_the_server_refuses_a_request_whose_job_dir_is_not_a_directory_without_ending(backend, tmp_path):
    backend.submit("ok", job(1), {})
    server = server_of(backend, "ok")
    assert final_status(backend, "ok").state is JobState.SUCCEEDED
    read_end, write_end = os.pipe()
    log = os.open(tmp_path / "stray.log", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        pid = launcher_server.start_launcher(backend.root, tmp_path / "missing", {}, read_end, log)
    finally:
        for fd in (read_end, write_end, log):
            os.close(fd)
    wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
             what="the stray launcher to end")
    assert "missing" in (tmp_path / "stray.log").read_text()  # its reason, in the log it was given
    assert server.is_running()
    backend.submit("still", job(1), {})
    assert server_of(backend, "still").pid == server.pid
    assert final_status(backend, "still").state is JobState.SUCCEEDED


def test_a_server_that_dies_before_it_listens_fails_the_start_naming_its_log(tmp_path):
    """The submitter waits for a new server's ready line: a server whose interpreter cannot even start (here a
    PYTHONHOME that does not exist) is a ServerError at once, naming the log its reason went to."""
    root = tmp_path / "ml"
    root.mkdir(mode=0o700)
    with pytest.raises(launcher_server.ServerError, match="did not start") as refused:
        launcher_server._start_server(root, {"PATH": os.environ["PATH"], "PYTHONHOME": str(tmp_path / "nowhere")})
    assert str(root / "launcher-server.log") in str(refused.value)
    assert "PYTHONHOME" in (root / "launcher-server.log").read_text()
    assert not launcher_server._listening(root)


def test_a_server_that_dies_after_taking_a_request_is_never_asked_again(tmp_path):
    """A server that received a request may have forked a launcher before it died: the submitter fails the
    submission (the launcher, if any, reads its stdin's end and starts nothing) instead of asking a fresh server,
    which would start the job twice."""
    root = tmp_path / "ml"
    root.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # a server that takes one request and dies
    dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:  # (through the root's descriptor, as the server binds: a socket's path is at most 107 bytes)
        listener.bind(f"/proc/self/fd/{dir_fd}/{launcher_server._socket_name(root)}")
    finally:
        os.close(dir_fd)
    listener.listen(8)
    requests = []

    def take_and_die() -> None:
        conn, _ = listener.accept()
        message, fds, _flags, _address = socket.recv_fds(conn, 1 << 16, 2)
        requests.append(json.loads(message))
        for fd in fds:
            os.close(fd)
        conn.close()

    taker = threading.Thread(target=take_and_die)
    taker.start()
    read_end, write_end = os.pipe()
    log = os.open(tmp_path / "launcher.log", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(launcher_server.ServerError, match="failed to answer"):
            launcher_server.start_launcher(root, tmp_path / "job", {"PATH": os.environ["PATH"]}, read_end, log)
    finally:
        for fd in (read_end, write_end, log):
            os.close(fd)
        taker.join(timeout=30)
        listener.close()
    assert [request["job_dir"] for request in requests] == [str(tmp_path / "job")]  # asked once
    assert not (root / "launcher-server.lock").exists()  # no fresh server was started to ask again
