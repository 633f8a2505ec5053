"""TrainingJobTrigger: serializes with its follower state, streams each line once, resumes where it stopped."""

from __future__ import annotations

import asyncio
import json
import logging
import re

import pytest

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.triggers.training_job import TrainingJobTrigger
from support import TRAINING_IMAGE, final_status

pytestmark = pytest.mark.integration

PRINT_100 = ["python", "-c", "import time\nfor i in range(100):\n    print('line', i, flush=True)\n    time.sleep(0.01)"]


def rebuild(trigger: TrainingJobTrigger) -> TrainingJobTrigger:
    """What the triggerer does with a stored trigger: import the class path, call it with the kwargs."""
    import importlib

    path, kwargs = trigger.serialize()
    module, _, cls = path.rpartition(".")
    return getattr(importlib.import_module(module), cls)(**kwargs)


async def first_event(trigger: TrainingJobTrigger):
    async for event in trigger.run():
        return event.payload


@pytest.fixture
def backend(tmp_path, monkeypatch) -> LocalBackend:
    """A local backend the trigger rebuilds from a connection, as it does in the triggerer."""
    extra = {"backend": "local", "local_root": str(tmp_path / "ml"), "local_image": str(TRAINING_IMAGE)}
    monkeypatch.setenv("AIRFLOW_CONN_ML_TEST", json.dumps({"conn_type": "ml_training", "extra": extra}))
    return LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=5)


def streamed_lines(capfd) -> list[str]:
    """The worker lines the trigger logged (Airflow's structlog writes them to the captured stdout)."""
    out = capfd.readouterr()
    return re.findall(r"\[rank 0\] line \d+", out.out + out.err)


def test_trigger_streams_every_line_once_and_resumes_from_its_cursor(backend, capfd):
    backend.submit("trig", TrainingJobSpec(framework="generic", command=PRINT_100, num_workers=1), {})
    trigger = TrainingJobTrigger("trig", ml_conn_id="ml_test", options={"poll_interval": 0.1})
    assert rebuild(trigger).serialize() == trigger.serialize()

    payload = asyncio.run(first_event(rebuild(trigger)))
    assert payload["action"] == "finish" and payload["status"]["state"] == "SUCCEEDED"
    assert streamed_lines(capfd) == [f"[rank 0] line {i}" for i in range(100)]

    # A trigger rebuilt from the state it had reached prints nothing twice.
    resumed = rebuild(TrainingJobTrigger("trig", ml_conn_id="ml_test", options=payload["options"],
                                         state=payload["state"]))
    again = asyncio.run(first_event(resumed))
    assert again["action"] == "finish"
    assert streamed_lines(capfd) == []


def test_trigger_reports_a_vanished_job(backend):
    payload = asyncio.run(first_event(TrainingJobTrigger("ghost", ml_conn_id="ml_test")))
    assert payload["action"] == "fail" and "vanished" in payload["message"]


def test_on_kill_cancels_the_job(backend):
    sleep = ["python", "-c", "import time; time.sleep(600)"]
    backend.submit("killme", TrainingJobSpec(framework="generic", command=sleep, num_workers=2), {})
    asyncio.run(TrainingJobTrigger("killme", ml_conn_id="ml_test").on_kill())
    assert backend.status("killme").state.value == "CANCELLED"


def test_a_watching_trigger_never_cancels_the_job_it_does_not_own(backend):
    sleep = ["python", "-c", "import time; time.sleep(600)"]
    backend.submit("notmine", TrainingJobSpec(framework="generic", command=sleep, num_workers=1), {})
    try:
        asyncio.run(TrainingJobTrigger("notmine", ml_conn_id="ml_test", owns_job=False, stream_logs=False).on_kill())
        assert backend.status("notmine").state.value == "RUNNING"
    finally:
        backend.cancel("notmine")


def test_a_fail_on_line_cancels_the_job_and_fires_a_final_failure(backend, capfd):
    script = "import time\nprint('epoch 1', flush=True)\nprint('CUDA out of memory', flush=True)\ntime.sleep(600)"
    backend.submit("oom", TrainingJobSpec(framework="generic", command=["python", "-c", script], num_workers=1), {})
    trigger = TrainingJobTrigger("oom", ml_conn_id="ml_test",
                                 options={"poll_interval": 0.1, "rules": {"fail_on": ["out of memory"]}})
    payload = asyncio.run(first_event(trigger))
    assert payload["action"] == "fail" and payload["retryable"] is False
    assert payload["match"]["line"] == "CUDA out of memory"
    assert backend.status("oom").state.value == "CANCELLED"


def test_the_last_batch_is_confirmed_after_it_is_shown_before_the_trigger_ends(backend):
    """A job that ended before its trigger started (as for a trigger a restarted triggerer runs): every
    line is shown, and the last save confirms the last batch, so no mark is left for a later restart to
    show again."""
    from airflow_ml_provider.jobs.drivers import SHOWING, follow_async
    from airflow_ml_provider.jobs.follow import Follower, FollowOptions

    backend.submit("last", TrainingJobSpec(framework="generic", command=PRINT_100, num_workers=1), {})
    final_status(backend, "last")  # ended before the trigger starts, as for a trigger a restarted triggerer runs
    order: list[str] = []

    class Recorder(logging.Handler):
        def emit(self, record):
            order.append(record.getMessage())

    log = logging.getLogger("test_last_batch")
    log.addHandler(Recorder())
    log.setLevel(logging.INFO)
    log.propagate = False

    async def save(state):
        order.append("save showing" if SHOWING in state else "save confirmed")

    step = asyncio.run(follow_async(Follower(FollowOptions(poll_interval=0.1)), log, backend, "last",
                                    backend.log_source("last"), on_progress=save))
    assert step.action.value == "finish"
    assert [o for o in order if o.startswith("[rank 0]")] == [f"[rank 0] line {i}" for i in range(100)]
    assert order[-1] == "save confirmed", order[-5:]
