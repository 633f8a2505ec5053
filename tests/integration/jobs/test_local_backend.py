"""The local backend with real processes: attach, cancel without orphans, failure classification."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time

import psutil
import pytest

from airflow_ml_provider.jobs.backends.base import JobNotFound, JobSubmissionError
from airflow_ml_provider.jobs.backends.local.backend import LocalBackend, job_processes
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState
from support import TRAINING_IMAGE, final_status, needs_horovod, wait_for

pytestmark = pytest.mark.integration

READY_THEN_SLEEP = ["python", "-c", "import time; print('ready', flush=True); time.sleep(600)"]


@pytest.fixture
def backend(tmp_path) -> LocalBackend:
    return LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=5)


def generic(command, workers=2, framework="generic") -> TrainingJobSpec:
    return TrainingJobSpec(framework=framework, command=command, num_workers=workers)


def ready_ranks(backend: LocalBackend, name: str) -> set[str]:
    path = backend.job_dir(name) / "output.log"
    text = path.read_text() if path.exists() else ""
    return {line.split("]")[0] for line in text.splitlines() if line.endswith("] ready")}


def uid(backend: LocalBackend, name: str) -> str:
    import json

    return json.loads((backend.job_dir(name) / "job.json").read_text())["uid"]


def assert_all_gone(pids: set[int], pgids: set[int]) -> None:
    alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"processes of the job still alive: {alive}"
    for pgid in pgids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pgid, 0)


@pytest.mark.parametrize("framework", ["generic", pytest.param("horovod", marks=needs_horovod)])
def test_cancel_leaves_no_process_of_the_job_alive(backend, framework):
    name = f"cancel-{framework}"
    assert backend.submit(name, generic(READY_THEN_SLEEP, framework=framework), {})
    wait_for(lambda: ready_ranks(backend, name) == {"[rank 0", "[rank 1"}, what="both ranks ready")
    procs = job_processes(uid(backend, name))
    pids = {p.pid for p in procs}
    pgids = {os.getpgid(pid) for pid in pids}
    assert len(pids) >= 3, "expected the launcher and two workers"
    if framework == "horovod":
        assert len(pgids) >= 2, "horovodrun's middlemen start their own sessions: the test must cover that"
    backend.cancel(name)
    assert_all_gone(pids, pgids)
    assert backend.status(name).state is JobState.CANCELLED


def test_submitting_a_running_job_again_attaches_and_runs_it_once(backend):
    name = "attach"
    assert backend.submit(name, generic(READY_THEN_SLEEP, workers=1), {}) is True
    wait_for(lambda: ready_ranks(backend, name), what="the worker")
    assert backend.submit(name, generic(READY_THEN_SLEEP, workers=1), {}) is False
    assert LocalBackend(backend.root, image=backend.image).submit(name, generic(READY_THEN_SLEEP, workers=1), {}) is False
    time.sleep(1)
    assert (backend.job_dir(name) / "output.log").read_text().count("ready") == 1
    assert not list(backend.root.glob("jobs/attach.*")), "nothing was archived: no second job"
    backend.cancel(name)


def test_a_finished_job_is_archived_and_a_new_one_started(backend):
    name = "rerun"
    backend.submit(name, generic(["python", "-c", "print('first')"], workers=1), {})
    wait_for(lambda: backend.status(name).state.is_terminal, what="first job")
    assert backend.submit(name, generic(["python", "-c", "print('second')"], workers=1), {}) is True
    wait_for(lambda: backend.status(name).state.is_terminal, what="second job")
    assert "first" in (backend.root / "jobs" / "rerun.1" / "output.log").read_text()
    assert "second" in (backend.job_dir(name) / "output.log").read_text()


@pytest.mark.parametrize("framework", ["generic", pytest.param("horovod", marks=needs_horovod)])
def test_exit_codes_and_the_first_failing_rank_are_reported(backend, framework):
    """Horovod ranks run unwrapped: their exit codes come from horovodrun's own report."""
    name = f"fails-{framework}"
    command = ["python", "-c", "import os, sys, time\nr = os.environ.get('AIRFLOW_ML_RANK') or os.environ['HOROVOD_RANK']\n"
               "print('rank', r, flush=True)\nsys.exit(7) if r == '1' else time.sleep(600)"]
    backend.submit(name, generic(command, framework=framework), {})
    status = wait_for(lambda: (s := backend.status(name)).state.is_terminal and s, what="failure")
    assert status.state is JobState.FAILED
    assert status.message == "rank 1 exited with code 7"
    assert status.exit_codes[1] == 7
    # the waiting peer is stopped, not left hanging: killed (horovodrun reports it when it can before exiting)
    assert status.exit_codes.get(0, -signal.SIGTERM) != 0
    uid = json.loads((backend.job_dir(name) / "job.json").read_text())["uid"]
    launcher = json.loads((backend.job_dir(name) / "launcher.json").read_text())["pid"]  # exits just after the status
    assert not job_processes(uid, exclude=launcher), "a rank of the ended job is still running"
    lines = backend.log_source(name).read().lines
    assert any(line.source == "rank 1" and line.text == "rank 1" for line in lines)


@pytest.mark.parametrize("framework", ["generic", pytest.param("horovod", marks=needs_horovod)])
def test_a_worker_killed_from_outside_is_a_preemption_not_a_user_failure(backend, framework):
    name = f"preempted-{framework}"
    backend.submit(name, generic(READY_THEN_SLEEP, framework=framework), {})
    wait_for(lambda: len(ready_ranks(backend, name)) == 2, what="workers")
    workers = [p for p in job_processes(uid(backend, name))
               if p.cmdline()[:2] == ["python", "-c"] and "time.sleep" in p.cmdline()[2]]
    assert len(workers) == 2
    workers[0].send_signal(signal.SIGKILL)
    status = wait_for(lambda: (s := backend.status(name)).state.is_terminal and s, what="preemption")
    assert status.state is JobState.PREEMPTED and "killed by a signal" in status.message


def test_a_killed_launcher_is_not_reported_as_running_or_succeeded(backend):
    name = "launcher-killed"
    backend.submit(name, generic(READY_THEN_SLEEP, workers=1), {})
    wait_for(lambda: ready_ranks(backend, name), what="the worker")
    import json

    launcher = json.loads((backend.job_dir(name) / "launcher.json").read_text())["pid"]
    os.kill(launcher, signal.SIGKILL)
    status = wait_for(lambda: (s := backend.status(name)).state.is_terminal and s, what="launcher death")
    assert status.state is JobState.PREEMPTED
    backend.cancel(name)  # the orphaned worker is still found by its marker and stopped
    assert not job_processes(uid(backend, name))


@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_resubmitting_after_the_launcher_was_killed_first_stops_the_old_attempts_workers(tmp_path, sandbox):
    """Unsandboxed, the workers outlive their killed launcher until the resubmission stops them; a
    sandbox ends with its launcher (bwrap --die-with-parent), taking every worker with it."""
    backend = LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=5, sandbox=sandbox)
    name = "relaunched"
    backend.submit(name, generic(READY_THEN_SLEEP), {})
    wait_for(lambda: len(ready_ranks(backend, name)) == 2, what="workers")
    old = uid(backend, name)
    import json

    os.kill(json.loads((backend.job_dir(name) / "launcher.json").read_text())["pid"], signal.SIGKILL)
    status = wait_for(lambda: (s := backend.status(name)).state.is_terminal and s, what="launcher death")
    assert status.state is JobState.PREEMPTED
    if json.loads((backend.job_dir(name) / "job.json").read_text())["plan"]["sandbox"]:
        wait_for(lambda: not job_processes(old), timeout=30, what="the sandboxed workers to end with their launcher")
    else:
        assert len(job_processes(old)) == 2, "the workers outlive their killed launcher, with nothing enforcing their lease"

    assert backend.submit(name, generic(READY_THEN_SLEEP), {}) is True  # what a follower does after PREEMPTED
    assert not job_processes(old), "an old attempt's worker survived the resubmission"
    assert uid(backend, name) != old and uid(backend, f"{name}.1") == old  # the old attempt archived
    wait_for(lambda: len(ready_ranks(backend, name)) == 2, what="the new attempt's workers")
    backend.cancel(name)
    assert not job_processes(uid(backend, name))


def test_missing_program_fails_with_its_name(backend):
    backend.submit("noprog", generic(["no-such-program-xyz"], workers=1), {})
    status = wait_for(lambda: (s := backend.status("noprog")).state.is_terminal and s, what="failure")
    assert status.state is JobState.FAILED and "no-such-program-xyz" in (backend.job_dir("noprog") / "output.log").read_text()


def test_unknown_jobs_and_images_without_horovod_are_refused(backend, tmp_path):
    with pytest.raises(JobNotFound):
        backend.status("never-submitted")
    without_horovod = tmp_path / "env"
    (without_horovod / "bin").mkdir(parents=True)
    with pytest.raises(JobSubmissionError, match="no horovodrun"):
        LocalBackend(tmp_path / "ml2", image=str(without_horovod)).submit(
            "x", generic(["python", "t.py"], framework="horovod"), {})
    with pytest.raises(JobSubmissionError, match="not a Python environment"):
        LocalBackend(tmp_path, image=str(tmp_path / "nowhere")).submit("y", generic(["python"]), {})


def test_the_status_stream_reports_the_end_of_a_job_without_waiting_for_the_interval(backend):
    """The trigger's stream notices status.json as soon as the launcher writes it, not a poll later."""
    import asyncio

    backend.submit("stream", generic(["python", "-c", "import time; time.sleep(2)"], workers=1), {})

    async def until_the_end():
        states = []
        async for status in backend.statuses("stream", interval=600):
            states.append(status.state)
            if status.state.is_terminal:
                return states

    states = asyncio.run(asyncio.wait_for(until_the_end(), timeout=60))
    assert states[-1] is JobState.SUCCEEDED and len(states) == 2, states


def test_the_end_of_a_job_wakes_its_follower_through_the_launchers_pidfd(backend):
    """What the status stream waits on: a pidfd of the launcher, readable only once the launcher has written
    the job's status and exited (so the wake finds the end, never a job still running); a pid whose start
    time is not the launcher's (a later process that reused it) gets no pidfd, and the stream stats instead."""
    import asyncio

    from airflow_ml_provider.jobs.backends.local.backend import _LauncherExit

    backend.submit("pidfd", generic(["python", "-c", "import time; time.sleep(1)"], workers=1), {})
    launcher = json.loads((backend.job_dir("pidfd") / "launcher.json").read_text())
    assert _LauncherExit.open({**launcher, "create_time": launcher["create_time"] - 1}) is None
    waiter = _LauncherExit.open(launcher)
    assert waiter is not None
    try:
        asyncio.run(waiter.wait(60))
        assert waiter.exited
        assert (backend.job_dir("pidfd") / "status.json").exists()
        assert not psutil.pid_exists(launcher["pid"]) or psutil.Process(launcher["pid"]).status() == psutil.STATUS_ZOMBIE
    finally:
        waiter.close()
    assert backend.status("pidfd").state is JobState.SUCCEEDED


def test_the_status_stream_of_an_ended_job_comes_once_an_interval(backend):
    """A follower goes on after the job's end while it drains the job's log (from Elasticsearch, which the
    shipper fills seconds later). The stream's quick look for the end made it spin there: every pass found
    the end markers and read the status again at once, thousands of times a second, each waking the
    follower into another log query."""
    import asyncio

    backend.submit("ended", generic(["python", "-V"], workers=1), {})
    final_status(backend, "ended")

    async def for_three_seconds():
        states = []
        async def read():
            async for status in backend.statuses("ended", interval=1.0):
                states.append(status.state)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(read(), timeout=3.0)
        return states

    states = asyncio.run(for_three_seconds())
    # one at once, then one a second (fewer when a loaded machine delays the reads); 18,739 before the fix
    assert set(states) == {JobState.SUCCEEDED} and 1 <= len(states) <= 4, f"{len(states)} statuses in 3 s"


def test_the_launcher_samples_each_ranks_cpu_and_memory_and_the_tracker_keeps_the_launchers_sample_only(backend):
    """Rank 0 spins, rank 1 sleeps: the launcher's resources line tells them apart (jobs.backends.local.resources),
    and the follow core keeps it as the view shows it. A rank printing a resources line of its own is ignored."""
    from airflow_ml_provider.logs.files import parse_line
    from airflow_ml_provider.logs.metrics import MetricsTracker

    forged = json.dumps({"event": "resources", "workers": {"0": {"cpu": 0.0, "mem_mib": 0.0, "procs": 9}}})
    work = ("import os, sys, time\n"
            "end = time.monotonic() + 6\n"
            "if os.environ['AIRFLOW_ML_RANK'] == '0':\n"
            "    while time.monotonic() < end: pass\n"
            "else:\n"
            f"    print({forged!r}, flush=True); time.sleep(6)\n")
    backend.submit("res", generic(["python", "-c", work]), {})
    assert final_status(backend, "res").state is JobState.SUCCEEDED
    lines = [parse_line(raw) for raw in (backend.job_dir("res") / "output.log").read_text().splitlines()]
    samples = [json.loads(line.text) for line in lines
               if line.source == "launcher" and line.text.startswith('{"event": "resources"')]
    assert samples, [str(line) for line in lines]
    workers = samples[0]["workers"]
    assert set(workers) == {"0", "1", "launcher"}, workers
    # spinning against sleeping, from the kernel's CPU times (a share of a core: on a loaded machine a spinning rank
    # got 19.9 %, the sleeping one 0.6 %)
    assert workers["0"]["cpu"] > 4 * max(workers["1"]["cpu"], 1.0), workers
    assert all(use["mem_mib"] > 1 and use["procs"] >= 1 for use in workers.values()), workers
    tracker = MetricsTracker()
    tracker.feed_lines(lines)
    assert tracker.state()["resources"]["workers"] == samples[-1]["workers"], "the launcher's, not rank 1's"


def test_each_ranks_metrics_of_a_real_job_are_a_curve_of_their_own(backend):
    """Two ranks report their own loss (data-parallel workers' local losses differ): the follow core follows rank 0
    and keeps rank 1's points as rank 1's curve, which the training view draws beside it."""
    from airflow_ml_provider.logs.files import parse_line
    from airflow_ml_provider.logs.metrics import MetricsTracker
    from airflow_ml_provider.plugins.training_view import page

    work = ("import json, os\nrank = int(os.environ['AIRFLOW_ML_RANK'])\nfor step in range(1, 6):\n"
            "    print(json.dumps({'event': 'metrics', 'step': step, 'loss': rank + 1 / step}), flush=True)\n")
    backend.submit("ranks", generic(["python", "-c", work]), {})
    assert final_status(backend, "ranks").state is JobState.SUCCEEDED
    tracker = MetricsTracker()
    tracker.feed_lines([parse_line(raw) for raw in (backend.job_dir("ranks") / "output.log").read_text().splitlines()])
    state = tracker.state()
    followed = state["metrics"]["loss"]
    other = "rank 1" if followed["source"] == "rank 0" else "rank 0"
    assert [step for step, _ in followed["series"]] == [1, 2, 3, 4, 5]
    assert [step for step, _ in state["others"]["loss"][other]["series"]] == [1, 2, 3, 4, 5]
    assert {value - 1 / step for step, value in state["others"]["loss"][other]["series"]} | \
        {value - 1 / step for step, value in followed["series"]} == {0.0, 1.0}, "each rank's own values"
    html = page({"ti": {"dag_id": "d", "task_id": "t", "state": "success"},
                 "view": {"metrics": state["metrics"], "others": state["others"]}})
    assert html.count("<polyline") == 2 and f">{other}</text>" in html
