"""The local sandbox as a boundary, each finding of the adversarial pass (issue 38) as an attack by a real job:
an earlier attempt's links never become a later attempt's mounts, the kernel's settings and root's files are
out of reach, a job's network is its own, its bounds end it named, and what it reports is read without
following its links. Where an attack also runs unsandboxed (``sandbox="off"``), it succeeds there: the test
sees what it checks."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import pytest

from airflow_ml_provider.jobs.backends.base import JobSubmissionError
from airflow_ml_provider.jobs.backends.local.backend import LocalBackend, job_processes
from airflow_ml_provider.jobs.backends.local.sandbox import SandboxLimits
from airflow_ml_provider.jobs.follow import confined
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState
from support import REPO, TRAINING_IMAGE, final_status, job_log, needs_sandbox, wait_for

pytestmark = [pytest.mark.integration, needs_sandbox]


def job(code: str, *args: str, workers: int = 1, **fields) -> TrainingJobSpec:
    return TrainingJobSpec(framework="generic", command=["python", "-c", textwrap.dedent(code), *args],
                           num_workers=workers, **fields)


def backend_at(tmp_path: Path, **options) -> LocalBackend:
    return LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=2, **options)


def report(backend: LocalBackend, name: str) -> dict:
    """Rank 0's ``REPORT {json}`` line."""
    log = job_log(backend, name)
    found = [line.split("REPORT ", 1)[1] for line in log.splitlines() if line.startswith("[rank 0] REPORT ")]
    assert found, log
    return json.loads(found[-1])


def test_links_an_attempt_leaves_in_its_directories_are_never_the_next_attempts_mounts(tmp_path):
    """S1: a first attempt replaced its model and checkpoint directories with links to a DAGs folder and to the
    job records, then killed itself (PREEMPTED); the resubmission bound the links' targets read-write and wrote
    a DAG file and a forged status. Now only the writable directories themselves are bound, mount points that
    no job can replace, and a writable directory reached through a link is refused at submit: the second
    attempt writes only into its own directories, where its first attempt's checkpoint waits."""
    dags = Path(os.environ["AIRFLOW_HOME"]) / f"dags-{secrets.token_hex(4)}"
    dags.mkdir(parents=True)
    backend = backend_at(tmp_path)
    job_dir = backend.root / "artifacts" / "relinked"
    spec = job("""
        import os, signal, sys, json
        model, ckpt = os.environ["AIRFLOW_ML_MODEL_DIR"], os.environ["AIRFLOW_ML_CHECKPOINT_DIR"]
        if not os.path.exists(os.path.join(ckpt, "ckpt-1.npz")):  # the first attempt
            open(os.path.join(ckpt, "ckpt-1.npz"), "w").write("weights")
            os.symlink(sys.argv[1], os.path.join(ckpt, "ckpt-2.npz"))  # a "checkpoint" that is a link
            try:
                os.rename(model, model + ".gone")  # the model directory, to become a link to the DAGs folder
                os.symlink(sys.argv[2], model)
                relinked = "yes"
            except OSError as exc:
                relinked = type(exc).__name__
            print("RELINKED " + relinked, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        wrote = []
        for directory in (model, ckpt):
            try:
                open(os.path.join(directory, "evil_dag.py"), "w").write("import os")
                wrote.append(directory)
            except OSError:
                pass
        print("REPORT " + json.dumps({"found": sorted(os.listdir(ckpt)), "model_is_link": os.path.islink(model),
                                     "wrote": wrote}), flush=True)
    """, str(backend.root / "jobs"), str(dags), model_dir=str(job_dir / "model"),
        checkpoint_dir=str(job_dir / "checkpoints"))
    assert backend.submit("relinked", spec, {})
    assert final_status(backend, "relinked").state is JobState.PREEMPTED, job_log(backend, "relinked")
    assert "RELINKED yes" not in job_log(backend, "relinked"), "a job replaced its bound directory"
    assert backend.submit("relinked", spec, {})  # the resubmission a preemption makes
    assert final_status(backend, "relinked").state is JobState.SUCCEEDED, job_log(backend, "relinked")
    assert list(dags.iterdir()) == [], "the job wrote into the DAGs folder"
    assert not any(path.name == "evil_dag.py" for path in (backend.root / "jobs").rglob("*"))
    result = report(backend, "relinked")
    assert result["found"] == ["ckpt-1.npz", "ckpt-2.npz", "evil_dag.py"] and not result["model_is_link"], result
    assert not (job_dir / "model").is_symlink() and (job_dir / "model" / "evil_dag.py").is_file()
    assert (job_dir / "checkpoints" / "ckpt-1.npz").read_text() == "weights"

    (job_dir / "model").rename(job_dir / "model.real")  # a link a job's user left where a directory is bound
    (job_dir / "model").symlink_to(dags)
    os.lchown(job_dir / "model", 1_500_000_123, 1_500_000_123)
    with pytest.raises(JobSubmissionError, match=r"model_dir: '.*/relinked/model' goes through the symbolic link"):
        backend.submit("relinked", spec, {})
    assert list(dags.iterdir()) == []


def test_a_tensorboard_directory_survives_a_preemption_and_a_link_left_in_its_place_is_never_followed(tmp_path):
    """S1 for AIRFLOW_ML_TENSORBOARD_DIR (inside the checkpoint directory): a first attempt writes two points and
    is preempted; the resubmission's points join them as a second event file of the same run. A later job of
    the same name replaces the directory with a link to a DAGs folder holding an event file it may not show, and
    its resubmission writes through the link: nothing reaches the DAGs folder (the job still succeeds, its
    TensorBoard failure reported in one line), the view's
    reader refuses the link, and a checkpoint directory that became a link (so the TensorBoard directory in it)
    is refused at submit."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from airflow_ml_provider.plugins.tensorboard_scalars import read_scalars

    dags = Path(os.environ["AIRFLOW_HOME"]) / f"dags-{secrets.token_hex(4)}"
    dags.mkdir(parents=True)
    backend = backend_at(tmp_path)
    job_dir = backend.root / "artifacts" / "boarded"
    spec = job("""
        import os, signal, sys
        from airflow_ml_provider.runtime.metrics_log import emit_metrics
        board, ckpt = os.environ["AIRFLOW_ML_TENSORBOARD_DIR"], os.environ["AIRFLOW_ML_CHECKPOINT_DIR"]
        assert os.path.dirname(board) == ckpt, board
        first = not os.path.exists(os.path.join(ckpt, "ckpt-2"))
        for step in (1, 2) if first else (3, 4):
            emit_metrics(step, 1.0 / step)
        if first:
            open(os.path.join(ckpt, "ckpt-2"), "w").write("2")
            from airflow_ml_provider.runtime.metrics_log import close_scalars
            close_scalars()
            if sys.argv[1] == "relink":
                os.rename(board, board + ".gone")
                os.symlink(sys.argv[2], board)
            os.kill(os.getpid(), signal.SIGKILL)
    """, "keep", str(dags), model_dir=str(job_dir / "model"), checkpoint_dir=str(job_dir / "checkpoints"))
    board = job_dir / "checkpoints" / "tensorboard"
    for _ in range(2):  # the first attempt, then the resubmission a preemption makes
        assert backend.submit("boarded", spec, {})
        final_status(backend, "boarded")
    assert final_status(backend, "boarded").state is JobState.SUCCEEDED, job_log(backend, "boarded")
    assert len(list(board.glob("*tfevents*"))) == 2, list(board.iterdir())
    accumulator = EventAccumulator(str(board))
    accumulator.Reload()
    assert [event.step for event in accumulator.Scalars("loss")] == [1, 2, 3, 4]
    assert [step for step, _ in read_scalars(str(board))["runs"]["."]["loss"]] == [1, 2, 3, 4]

    shutil.copy(next(board.glob("*tfevents*")), dags / "events.out.tfevents.1.secret")  # a "loss" at steps 1, 2
    before = sorted(dags.iterdir())
    job_dir = backend.root / "artifacts" / "relinking"
    board = job_dir / "checkpoints" / "tensorboard"
    relinking = spec.model_copy(update={"command": [*spec.command[:3], "relink", str(dags)],
                                        "model_dir": str(job_dir / "model"),
                                        "checkpoint_dir": str(job_dir / "checkpoints")})
    for _ in range(2):
        assert backend.submit("relinking", relinking, {})
        final_status(backend, "relinking")
    assert final_status(backend, "relinking").state is JobState.SUCCEEDED, job_log(backend, "relinking")
    assert board.is_symlink() and sorted(dags.iterdir()) == before, "the job wrote through its link"
    assert '"event": "tensorboard"' in job_log(backend, "relinking"), "the writer's failure was not reported"
    found = read_scalars(str(board))
    assert found["runs"] == {} and found["note"].startswith("not read"), found

    (job_dir / "checkpoints").rename(job_dir / "checkpoints.real")
    (job_dir / "checkpoints").symlink_to(dags)  # a link a job's user left where the directory is bound
    os.lchown(job_dir / "checkpoints", 1_500_000_123, 1_500_000_123)
    with pytest.raises(JobSubmissionError, match=r"checkpoint_dir: '.*/relinking/checkpoints' goes through the symb"):
        backend.submit("relinking", relinking, {})
    assert sorted(dags.iterdir()) == before


def test_a_job_cannot_write_kernel_settings_nor_read_roots_private_files(tmp_path):
    """S2 and M-b: the job wrote the host's kernel.domainname (uid 0, /proc/sys writable, the UTS namespace
    shared) and read any root-owned file not on the hidden list. The test writes back what it read, so a
    regression changes nothing on the host."""
    private = Path("/var/tmp") / f"root-only-{secrets.token_hex(4)}"  # visible in the sandbox (not its /tmp)
    private.write_text("ssh key")
    private.chmod(0o600)
    backend = backend_at(tmp_path)
    assert backend.submit("kernel", job("""
        import json, os, sys
        found = {"uid": os.getuid()}
        name = "/proc/sys/kernel/domainname"
        before = open(name).read().strip()
        try:
            with open(name, "w") as handle:
                handle.write("attacker")
            found["domainname"] = "written"
            with open(name, "w") as handle:
                handle.write(before)
        except OSError as exc:
            found["domainname"] = type(exc).__name__
        for path in ("/proc/sys/vm/drop_caches", "/proc/sys/kernel/core_pattern"):
            try:
                open(path, "w").write("3" if "drop" in path else "core")
                found[path] = "written"
            except OSError as exc:
                found[path] = type(exc).__name__
        try:
            found["private"] = open(sys.argv[1]).read()
        except OSError as exc:
            found["private"] = type(exc).__name__
        print("REPORT " + json.dumps(found), flush=True)
    """, str(private)), {})
    status = final_status(backend, "kernel")
    private.unlink()
    assert status.state is JobState.SUCCEEDED, job_log(backend, "kernel")
    found = report(backend, "kernel")
    assert found["uid"] != 0
    assert found["domainname"] in ("OSError", "PermissionError") and found["private"] == "PermissionError", found
    assert Path("/proc/sys/kernel/domainname").read_text().strip() != "attacker"
    assert found["/proc/sys/vm/drop_caches"] != "written" and found["/proc/sys/kernel/core_pattern"] != "written"


def _listener() -> tuple[socket.socket, int]:
    server = socket.create_server(("127.0.0.1", 0))
    return server, server.getsockname()[1]


def _answer(server: socket.socket, answer: bytes) -> None:
    """A host service on loopback: every connection gets ``answer``."""
    while True:
        client, _ = server.accept()
        client.sendall(answer)
        client.close()


def test_a_job_reaches_no_other_jobs_rendezvous_nor_a_host_service_only_what_egress_allows(tmp_path):
    """S3: jobs shared the host's network, so one job's pickle ran in another's torchrun agent through its c10d
    store, and every job reached the API server and the metadata DB on loopback. Now a job's workers share a
    loopback of their own: the victim's rendezvous port and a host service are refused, while an endpoint the
    deployment allows (``egress``) is relayed, and the job's own two workers still meet."""
    service, service_port = _listener()
    allowed, allowed_port = _listener()
    for server, answer in ((service, b"api server"), (allowed, b"allowed store")):
        threading.Thread(target=_answer, args=(server, answer), daemon=True).start()
    deep = tmp_path / ("a-root-deep-enough-that-a-socket-path-in-it-would-not-fit-" * 2)  # (AF_UNIX: 107 bytes)
    backend = backend_at(deep, limits=SandboxLimits(egress=(f"127.0.0.1:{allowed_port}",)))
    victim = job("""
        import os, socket
        server = socket.create_server(("127.0.0.1", 0))
        open(os.path.join(os.environ["AIRFLOW_ML_MODEL_DIR"], "port"), "w").write(str(server.getsockname()[1]))
        print("listening", flush=True)
        while True:
            client = server.accept()[0]
            client.sendall(b"victim rendezvous")
            client.close()
    """)
    assert backend.submit("victim", victim.model_copy(
        update={"model_dir": str(backend.root / "artifacts" / "victim" / "model")}), {})
    wait_for(lambda: "listening" in job_log(backend, "victim"), what="the victim's rendezvous")
    victim_port = (backend.root / "artifacts" / "victim" / "model" / "port").read_text()
    probe = """
        import json, os, socket, sys
        found = {}
        for name, port in (("victim", sys.argv[1]), ("service", sys.argv[2]), ("allowed", sys.argv[3])):
            try:
                with socket.create_connection(("127.0.0.1", int(port)), timeout=5) as conn:
                    found[name] = conn.recv(64).decode() or "connected"
            except OSError as exc:
                found[name] = type(exc).__name__
        rank, machines = os.environ["AIRFLOW_ML_RANK"], os.environ["AIRFLOW_ML_MACHINES"].split(",")
        mine = int(machines[int(rank)].split(":")[1])
        if rank == "0":
            server = socket.create_server(("127.0.0.1", mine))
            found["peer"] = server.accept()[0].recv(16).decode()
        else:
            host, port = machines[0].split(":")
            for _ in range(100):
                try:
                    socket.create_connection((host, int(port)), timeout=5).sendall(b"hello rank 0")
                    break
                except OSError:
                    import time; time.sleep(0.1)
        print("REPORT " + json.dumps(found), flush=True)
    """
    assert backend.submit("attacker", job(probe, victim_port, str(service_port), str(allowed_port), workers=2), {})
    status = final_status(backend, "attacker")
    backend.cancel("victim")
    assert status.state is JobState.SUCCEEDED, job_log(backend, "attacker")
    found = report(backend, "attacker")
    assert found["victim"] == "ConnectionRefusedError" and found["service"] == "ConnectionRefusedError", found
    assert found["allowed"] == "allowed store" and found["peer"] == "hello rank 0", found

    off = backend_at(tmp_path / "off", sandbox="off")  # the same attack unsandboxed reaches both
    assert off.submit("victim", victim.model_copy(update={"model_dir": str(off.root / "artifacts" / "victim" / "model")}), {})
    wait_for(lambda: "listening" in job_log(off, "victim"), what="the unsandboxed victim's rendezvous")
    victim_port = (off.root / "artifacts" / "victim" / "model" / "port").read_text()
    assert off.submit("attacker", job(probe, victim_port, str(service_port), str(allowed_port), workers=2), {})
    assert final_status(off, "attacker").state is JobState.SUCCEEDED
    off.cancel("victim")
    assert report(off, "attacker")["victim"] == "victim rendezvous" and report(off, "attacker")["service"] == "api server"


def test_a_job_writes_no_data_a_ui_user_may_name_only_its_declared_outputs(tmp_path):
    """M1': any job could write a file into the shared ``<root>/data`` for a UI user's ``data_path`` to name.
    Now every job reads ``<root>/data`` and writes only its own directory and the output directories it declares (a
    preprocessing shard's folder), made for it by the submitter."""
    backend = backend_at(tmp_path)
    data = backend.root / "data"
    shard = data / "pipeline" / "run-1" / "processed"
    writer = """
        import json, os, sys
        found = {}
        for path in sys.argv[1:]:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "w").write("x")
                found[path] = "written"
            except OSError as exc:
                found[path] = type(exc).__name__
        print("REPORT " + json.dumps(found), flush=True)
    """
    planted, output = str(data / "uploads" / "train.csv"), str(shard / "part-0.npz")
    assert backend.submit("writer", job(writer, planted, output), {})
    assert final_status(backend, "writer").state is JobState.SUCCEEDED
    assert set(report(backend, "writer").values()) <= {"PermissionError", "OSError"}
    assert backend.submit("preprocess", job(writer, planted, output, output_dirs=[str(shard)]), {})
    assert final_status(backend, "preprocess").state is JobState.SUCCEEDED
    assert report(backend, "preprocess")[output] == "written" and report(backend, "preprocess")[planted] != "written"
    assert not Path(planted).exists() and Path(output).read_text() == "x"
    with pytest.raises(JobSubmissionError, match=r"output_dirs: '.*/jobs' is in a place jobs may not write"):
        backend.submit("records", job(writer, output_dirs=[str(backend.root / "jobs")]), {})


def test_a_reported_path_under_a_job_directory_that_became_a_link_is_not_accepted(tmp_path):
    """M-a: a job made its model directory a link to $AIRFLOW_HOME and reported model/airflow.cfg, which the
    follower resolved inside the (resolved) root and accepted as the model. A root's own link is not followed."""
    home = tmp_path / "airflow-home"
    home.mkdir()
    (home / "airflow.cfg").write_text("[core]\nfernet_key = secret\n")
    job_dir = tmp_path / "artifacts" / "trainer"
    job_dir.mkdir(parents=True)
    (job_dir / "model").symlink_to(home)
    roots = (str(job_dir), str(job_dir / "model"))
    assert confined(str(job_dir / "model" / "airflow.cfg"), roots) is None
    (job_dir / "model").unlink()
    (job_dir / "model").mkdir()
    (job_dir / "model" / "model.txt").write_text("weights")
    assert confined(str(job_dir / "model" / "model.txt"), roots) == str(job_dir / "model" / "model.txt")


def _peak_processes(backend: LocalBackend, name: str, stop: threading.Event, found: list[int]) -> None:
    """How many processes the job has, sampled (its marker's: the suite's other processes do not count)."""
    while not stop.is_set():
        try:
            found.append(len(job_processes(json.loads((backend.job_dir(name) / "job.json").read_text())["uid"])))
        except (OSError, ValueError):
            pass
        stop.wait(0.05)


@pytest.mark.parametrize(("case", "code", "limits", "named"), [
    ("fork-bomb", """
        import os, time
        print("forking", flush=True)
        while True:
            try:
                os.fork()
            except OSError:
                time.sleep(0.5)
                os._exit(1)
    """, {"max_processes": 64}, "the job reached its limit of 64 processes ([ml_training] local_job_max_processes)"),
    ("memory-hog", """
        print("allocating", flush=True)
        hog = []
        while True:
            hog.append(bytearray(16 * 2**20))
    """, {"memory_mb": 256}, "the job exceeded its memory limit of 256 MiB ([ml_training] local_job_memory_mb)"),
    ("tmp-hog", """
        print("filling /tmp", flush=True)
        with open("/tmp/fill", "wb") as handle:
            while True:
                handle.write(b"x" * 2**20)
    """, {"memory_mb": 256, "tmp_mb": 1024}, "the job exceeded its memory limit of 256 MiB"),
])
def test_a_job_past_its_bounds_fails_naming_the_bound_and_the_host_stays_within_them(tmp_path, case, code, limits,
                                                                                     named):
    """M-c: 3,000 MiB written to a job's /tmp took 3.8 GiB of the host, and a job forked 2,000 processes. Now
    each job's memory (its tmpfs included) and processes are bounded by cgroups of its own."""
    backend = backend_at(tmp_path, limits=SandboxLimits(**limits))
    peaks, stop = [], threading.Event()
    watcher = threading.Thread(target=_peak_processes, args=(backend, case, stop, peaks))
    watcher.start()
    try:
        assert backend.submit(case, job(code), {})
        status = final_status(backend, case, timeout=180)
    finally:
        stop.set()
        watcher.join()
    assert status.state is JobState.FAILED and named in status.message, (status, job_log(backend, case))
    if case == "fork-bomb":
        assert 8 < max(peaks) <= 64 + 2, f"not bounded at 64 processes (the launcher and bwrap beside them): {peaks}"


def test_the_sandbox_refuses_user_namespaces_ptrace_and_mounts(tmp_path):
    """Low: a job could make user namespaces and, with ptrace, stop its sandbox's init until its deadline."""
    backend = backend_at(tmp_path)
    assert backend.submit("calls", job("""
        import ctypes, json, subprocess
        libc = ctypes.CDLL(None, use_errno=True)
        found = {}
        found["ptrace_init"] = libc.ptrace(16, 1, 0, 0) == 0  # PTRACE_ATTACH to the sandbox's init
        found["unshare_user"] = subprocess.run(["unshare", "--user", "true"], capture_output=True).returncode == 0
        found["mount"] = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) == 0
        found["keyctl"] = libc.syscall(250, 0, 0, 0, 0, 0) >= 0
        print("REPORT " + json.dumps(found), flush=True)
    """), {})
    assert final_status(backend, "calls").state is JobState.SUCCEEDED, job_log(backend, "calls")
    found = report(backend, "calls")
    assert not (found["ptrace_init"] or found["unshare_user"] or found["mount"] or found["keyctl"]), found


def test_no_signal_from_inside_the_sandbox_ends_its_init_the_spawner(tmp_path):
    """The spawner is the sandbox's init (its end is the sandbox's): a job that signals it, as the user it shares,
    changes nothing, and the job runs to its own end."""
    backend = backend_at(tmp_path)
    assert backend.submit("signals", job("""
        import json, os, signal, time
        sent = {}
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGKILL):
            try:
                os.kill(1, signum)
                sent[signum.name] = True
            except OSError as exc:
                sent[signum.name] = exc.strerror
        time.sleep(1)
        print("REPORT " + json.dumps(sent), flush=True)
    """), {})
    assert final_status(backend, "signals").state is JobState.SUCCEEDED, job_log(backend, "signals")
    assert set(report(backend, "signals")) == {"SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGKILL"}


_UNPRIVILEGED_SUBMITTER = """
import json, sys, time
from airflow_ml_provider.jobs.backends.local.backend import LocalBackend, job_processes
from airflow_ml_provider.jobs.spec import TrainingJobSpec
root, image, port = sys.argv[1:4]
backend = LocalBackend(root, image=image, cancel_grace_s=2)
probe = '''
import json, os, socket
found = {"uid": os.getuid()}
try:
    open("/proc/sys/kernel/domainname", "w").write("attacker")
    found["domainname"] = "written"
except OSError as exc:
    found["domainname"] = type(exc).__name__
try:
    socket.create_connection(("127.0.0.1", int(os.environ["HOST_PORT"])), timeout=5)
    found["host"] = "connected"
except OSError as exc:
    found["host"] = type(exc).__name__
print("REPORT " + json.dumps(found), flush=True)
'''
backend.submit("unprivileged", TrainingJobSpec(framework="generic", command=["python", "-c", probe], num_workers=1,
                                               env={"HOST_PORT": port}), {})
while not backend.status("unprivileged").state.is_terminal:
    time.sleep(0.1)
print(json.dumps({"state": backend.status("unprivileged").state.value,
                  "log": (backend.job_dir("unprivileged") / "output.log").read_text()}))
"""


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").exists(), reason="needs root, to become nobody")
def test_a_sandbox_made_by_an_unprivileged_user_holds_the_same_boundary(tmp_path):
    """Where Airflow runs as an unprivileged user, its jobs run as that user in a user namespace of their own
    (it cannot give them a uid of their own): the network, the kernel settings and the bounds' refusal hold
    the same. The submitter here is the system's Python as ``nobody``, with this package on its path."""
    site = next(Path(sys.prefix, "lib").glob("python3*/site-packages"))
    if any(not os.stat(path).st_mode & 0o001 for path in (REPO, *REPO.parents, site)):
        pytest.skip(f"{REPO} is not reachable by other users")
    work = Path(tempfile.mkdtemp(dir="/var/tmp"))  # not under /tmp: pytest's folders there are root's alone
    try:
        os.chmod(work, 0o755)
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(work / "image")], check=True)
        (work / "ml").mkdir()
        os.chown(work / "ml", 65534, 65534)
        server, port = _listener()
        result = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
             _UNPRIVILEGED_SUBMITTER, str(work / "ml"), str(work / "image"), str(port)],
            env={"PATH": os.defpath, "HOME": "/nonexistent", "PYTHONPATH": f"{REPO}{os.pathsep}{site}"},
            capture_output=True, text=True, timeout=120)
        server.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.splitlines()[-1])
    assert outcome["state"] == "SUCCEEDED", outcome["log"]
    found = json.loads(outcome["log"].split("REPORT ", 1)[1].splitlines()[0])
    assert found == {"uid": 65534, "domainname": "OSError", "host": "ConnectionRefusedError"}, found
    assert "no cgroup for the job" in outcome["log"], "a user without cgroup delegation is told memory is unbounded"
