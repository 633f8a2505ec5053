"""The local launcher against hostile or broken output, with real worker processes: a 300 MB line with no
newline, invalid UTF-8 from a Horovod rank, a rank forging the launcher's lines, a full disk, and a
job its own task cancels."""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend, job_processes
from airflow_ml_provider.jobs.backends.local.output import CONTINUED, MAX_LINE, MAX_PIECES
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState
from support import TRAINING_IMAGE, needs_horovod, needs_sandbox, wait_for

pytestmark = pytest.mark.integration


def said(lines) -> list[str]:
    """The launcher's own lines, less its resources samples (jobs.backends.local.resources: one every 15 s)."""
    return [line.text for line in lines if line.source == "launcher" and not line.text.startswith('{"event": "resources"')]

READY_THEN_SLEEP = ["python", "-c", "import time; print('ready', flush=True); time.sleep(600)"]


@pytest.fixture
def backend(tmp_path) -> LocalBackend:
    return LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=2)


def spec(code: str, framework: str = "generic", workers: int = 1, **fields) -> TrainingJobSpec:
    return TrainingJobSpec(framework=framework, command=["python", "-c", textwrap.dedent(code)],
                           num_workers=workers, **fields)


def final(backend: LocalBackend, name: str, timeout: float = 180):
    return wait_for(lambda: (s := backend.status(name)).state.is_terminal and s, timeout, what=f"{name} to end")


def all_lines(backend: LocalBackend, name: str) -> list:
    """The job's log as the follow core reads it (FileLogSource), to its end."""
    source, cursor, lines = backend.log_source(name), None, []
    while True:
        batch = source.read(cursor)
        if not batch.lines:
            return lines
        lines, cursor = lines + batch.lines, batch.cursor


def uid(backend: LocalBackend, name: str) -> str:
    return json.loads((backend.job_dir(name) / "job.json").read_text())["uid"]


def wait_ready(backend: LocalBackend, name: str) -> None:
    log = backend.job_dir(name) / "output.log"
    wait_for(lambda: log.exists() and "] ready" in log.read_text(), what=f"{name} to print ready")


def test_a_300_mb_line_without_a_newline_keeps_the_launcher_and_the_log_bounded(backend):
    """Before: the launcher held the whole line (1.3 GiB RSS) and put 300 MB into the task log."""
    name = "long-line"
    assert backend.submit(name, spec("""
        import sys
        chunk = b"x" * (1 << 20)
        for _ in range(300):
            sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
    """), {})
    launcher = psutil.Process(json.loads(wait_for(
        lambda: (p := backend.job_dir(name) / "launcher.json").exists() and p.read_text())).get("pid"))
    peak = []

    def sample():
        while True:
            try:
                peak.append(launcher.memory_info().rss)
            except psutil.Error:
                return
            threading.Event().wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    assert final(backend, name).state is JobState.SUCCEEDED
    sampler.join(timeout=30)
    assert peak and max(peak) < 200 << 20, f"the launcher's RSS reached {max(peak) >> 20} MiB"
    log = backend.job_dir(name) / "output.log"
    assert log.stat().st_size < 2 * MAX_LINE * MAX_PIECES, "the log keeps at most MAX_PIECES pieces of one line"
    lines = all_lines(backend, name)
    pieces = [line for line in lines if line.source == "rank 0" and line.text.endswith(CONTINUED)]
    assert len(pieces) == MAX_PIECES and all(len(line.text) <= MAX_LINE + len(CONTINUED) for line in pieces)
    dropped = 300 * (1 << 20) - MAX_LINE * MAX_PIECES
    assert any(line.text.startswith(f"[{dropped} more bytes of this line dropped") for line in lines)


def test_a_rank_cannot_forge_the_launchers_lines(backend):
    """Before: a line just over the reader's 1 MiB split, or a \\r, started a ``[launcher]`` line."""
    name = "forger"
    forged = "[launcher] job ended: SUCCEEDED"
    assert backend.submit(name, spec(f"""
        import sys
        forged = {forged!r}
        print("x" * ((1 << 20) - len("[rank 0] ")) + forged)
        print("x" * {MAX_LINE} + forged)
        for sep in ("\\r", "\\x0b", "\\x0c", "\\x1c", "\\x85", "\\u2028", "\\u2029"):
            print("progress" + sep + forged)
        sys.exit(3)
    """), {})
    status = final(backend, name)
    assert status.state is JobState.FAILED and status.message == "rank 0 exited with code 3"
    assert said(all_lines(backend, name)) == ["job ended: FAILED rank 0 exited with code 3"]


@needs_horovod
@pytest.mark.parametrize("sandbox", [pytest.param("auto", marks=needs_sandbox), "off"])
def test_a_horovod_rank_printing_invalid_utf8_or_writing_to_horovodruns_output_does_not_hang_or_forge(tmp_path, sandbox):
    """Before: one invalid byte killed horovodrun's output forwarder and the rank blocked on its pipe. A rank that
    writes into horovodrun's own output forges no launcher line; in its sandbox, as a user of its own, it cannot
    even open that pipe (the launcher's)."""
    backend = LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=2, sandbox=sandbox)
    name = "hvd-bytes"
    assert backend.submit(name, spec("""
        import os, sys
        sys.stdout.buffer.write(b"bad \\xff\\xfe byte\\n")
        sys.stdout.flush()
        for i in range(4000):  # far more than a pipe holds: a dead forwarder would block the rank here
            print(f"line {i} " + "y" * 100)
        pid, top = os.getppid(), None  # find horovodrun above the rank (and its middlemen); write to its stdout
        while pid > 1:
            if b"horovodrun" in open(f"/proc/{pid}/cmdline", "rb").read():
                top = pid
            pid = int(next(l.split()[1] for l in open(f"/proc/{pid}/status") if l.startswith("PPid:")))
        try:
            with open(f"/proc/{top}/fd/1", "w") as out:
                out.write("[launcher] job ended: SUCCEEDED\\n")
        except PermissionError:
            print("horovodrun's output is out of reach", flush=True)
        print("done", flush=True)
    """, framework="horovod", workers=2), {})
    status = final(backend, name)
    assert status.state is JobState.SUCCEEDED, status
    lines = all_lines(backend, name)
    assert {line.text for line in lines if line.source == "rank 0"} >= {"bad \ufffd\ufffd byte", "done"}
    assert said(lines) == ["job ended: SUCCEEDED"]
    forged = any(line.source == "horovodrun" and line.text == "[launcher] job ended: SUCCEEDED" for line in lines)
    refused = any(line.text == "horovodrun's output is out of reach" for line in lines)
    assert (refused, forged) == ((True, False) if sandbox == "auto" else (False, True)), lines


@pytest.mark.parametrize("framework", ["generic", pytest.param("horovod", marks=needs_horovod)])
def test_a_job_its_own_task_cancels_is_recorded_cancelled_not_preempted(backend, framework):
    """on_kill -> cancel: before, the launcher's record said PREEMPTED (rank 0 was killed by a signal)."""
    name = f"own-cancel-{framework}"
    assert backend.submit(name, TrainingJobSpec(framework=framework, command=READY_THEN_SLEEP, num_workers=1), {})
    wait_ready(backend, name)
    backend.cancel(name, "the task was killed")
    wait_for(lambda: (backend.job_dir(name) / "status.json").exists(), what="the launcher's record")
    record = json.loads((backend.job_dir(name) / "status.json").read_text())
    assert (record["state"], record["message"]) == ("CANCELLED", "the task was killed")
    lines = all_lines(backend, name)
    assert said(lines) == ["job ended: CANCELLED the task was killed"]
    # issue 25 D6: horovodrun's 24-line traceback about the rank it saw end is not shown for a cancel
    assert not [line for line in lines if "Traceback" in line.text or "RuntimeError" in line.text], lines


@pytest.fixture
def small_disk(tmp_path) -> Path:
    """A 4 MiB tmpfs (needs root, as CI has)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> None:
    chunk = b"\0" * 65536
    with open(disk / "ballast", "ab", buffering=0) as handle:
        while True:
            try:
                handle.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
    with open(disk / "ballast-small", "ab", buffering=0) as handle:  # the last partial page too
        try:
            while handle.write(b"\0" * 512):
                pass
        except OSError:
            pass


DEADLINE_S = 15  # the deadline case's: the disk is full well before it (checked), and the test waits no longer


@pytest.mark.parametrize("how", ["output", "cancel", "deadline"])
def test_a_full_disk_ends_the_job_failed_with_the_reason_and_cancel_and_the_deadline_still_work(small_disk, how):
    """Before: ENOSPC on output.log killed the pump and watchdog threads (no deadline any more), cancel()
    raised OSError before stopping anything, and no status.json was written."""
    backend = LocalBackend(small_disk / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=2)
    name = f"full-{how}"
    model_dir = backend.root / "artifacts" / name / "model"  # the job's own directory: visible in its sandbox
    go = model_dir / "go"
    submitted = time.monotonic()
    assert backend.submit(name, spec(f"""
        import os, time
        print("ready", flush=True)
        while not os.path.exists(os.path.join(os.environ["AIRFLOW_ML_MODEL_DIR"], "go")):
            time.sleep(0.1)
        while {how == "output"}:
            print("z" * 1000, flush=True)
        time.sleep(600)
    """, timeout_s=DEADLINE_S if how == "deadline" else None, model_dir=str(model_dir)), {})
    wait_ready(backend, name)
    job_uid = uid(backend, name)
    fill(small_disk)
    go.touch()
    assert time.monotonic() - submitted < DEADLINE_S, "the deadline came before the disk was full: nothing was shown"
    if how == "cancel":
        backend.cancel(name, "stopped on a full disk")
    status = final(backend, name)
    expected = {
        "output": (JobState.FAILED, "could not write the job's log"),
        "cancel": (JobState.CANCELLED, ""),
        "deadline": (JobState.FAILED, f"deadline of {DEADLINE_S} s exceeded"),
    }[how]
    assert status.state is expected[0] and status.message.startswith(expected[1]), status
    if how == "output":
        assert status.message.endswith("No space left on device")
    wait_for(lambda: not job_processes(job_uid), timeout=30, what="every process of the job to end")
    record = json.loads((backend.job_dir(name) / "status.json").read_text())
    assert record["state"] == expected[0].value, "the launcher records the end even on a full disk"


def _tf_notices(lines: list, source: str) -> list[str]:
    return [line.text for line in lines if line.source == source and (
        "absl::InitializeLog" in line.text or "cpu_feature_guard" in line.text or "port.cc" in line.text
        or "rebuild TensorFlow" in line.text)]


def _unrecorded_copy(image: Path, folder: Path) -> Path:
    """The training environment as another prefix (its files linked, not copied) without its Horovod build
    record, as an image that ``make training-env`` did not build is."""
    copy = folder / "unrecorded-image"
    (copy / "bin").mkdir(parents=True)
    shutil.copy(image / "pyvenv.cfg", copy)
    for entry in (image / "bin").iterdir():
        (copy / "bin" / entry.name).symlink_to(entry)
    for entry in ("lib", "lib64", "include"):
        if (image / entry).exists():
            (copy / entry).symlink_to(image / entry)
    return copy


@needs_horovod
def test_a_horovod_job_log_starts_quiet_and_horovodrun_probes_only_an_image_that_did_not_record_its_build(
        backend, tmp_path):
    """Issue 25 D6: horovodrun imports TensorFlow (in a probe of the build it forks before each run), which
    printed TensorFlow's start-up notices at the start of every Horovod task's log. An image whose build
    ``make training-env`` recorded is not probed at all; another one is, and the notices are dropped unless
    ``AIRFLOW_ML_TF_STARTUP_LOGS=1`` asks for them."""
    show = {"AIRFLOW_ML_TF_STARTUP_LOGS": "1"}
    hello = "print('hello', flush=True)"
    unrecorded = LocalBackend(tmp_path / "ml2", image=str(_unrecorded_copy(TRAINING_IMAGE, tmp_path)))
    runs = {"recorded": (backend, {}), "recorded-shown": (backend, show),
            "unrecorded": (unrecorded, {}), "unrecorded-shown": (unrecorded, show)}
    lines = {}
    for name, (where, env) in runs.items():
        assert where.submit(name, spec(hello, framework="horovod", workers=1, env=env), {})
    for name, (where, _) in runs.items():
        assert final(where, name).state is JobState.SUCCEEDED, where.job_dir(name).joinpath("output.log").read_text()
        lines[name] = all_lines(where, name)
        assert "hello" in [line.text for line in lines[name]], lines[name]
    assert _tf_notices(lines["unrecorded-shown"], "horovodrun"), "the unrecorded image's build was not probed"
    assert not _tf_notices(lines["recorded-shown"], "horovodrun"), "the recorded image's build was probed"
    for name in ("recorded", "unrecorded"):
        assert not _tf_notices(lines[name], "horovodrun"), lines[name]
    # a rank's failure (no stop asked) still shows horovodrun's traceback, after the rank's own lines
    assert backend.submit("hvd-fails", spec("import sys; print('failing', flush=True); sys.exit(3)",
                                            framework="horovod", workers=1), {})
    assert final(backend, "hvd-fails").state is JobState.FAILED
    lines = all_lines(backend, "hvd-fails")
    assert any(line.source == "horovodrun" and line.text == "Traceback (most recent call last):" for line in lines)
