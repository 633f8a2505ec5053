"""The follow loop's write-ahead position: a process that dies between saving a batch's position and
showing the batch loses no line on restart, and the lines it shows a second time are labelled.

The "death" is an exception raised by the save callback right after it stored the state, the one
point a real SIGKILL can hit that ``tests/integration/restarts/test_triggerer_restart.py`` (a real
triggerer, killed at a random point) cannot aim at."""

from __future__ import annotations

import asyncio
import logging

import pytest

from airflow_ml_provider.jobs.drivers import AGAIN, SHOWING, follow_async, show_again
from airflow_ml_provider.jobs.follow import Follower, FollowOptions
from airflow_ml_provider.logs.files import FileLogSource
from airflow_ml_provider.logs.source import LogSourceUnavailable


class Died(Exception):
    """The process stopped right after its state was saved."""


class Shown(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def shown():
    log = logging.getLogger(f"test_show_again.{id(object())}")
    handler = Shown()
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    return log, handler.messages


def dying_after(saves: int, saved: list[dict]):
    """A save callback that stores each state and dies right after storing the ``saves``-th."""
    async def save(state):
        saved.append(state)
        if len(saved) == saves:
            raise Died
    return save


def numbers(messages: list[str], prefix: str = "") -> list[int]:
    return [int(m.rsplit(" ", 1)[1]) for m in messages if m.startswith(f"{prefix}[rank 0] line ")]


class Gone(FileLogSource):
    """The job's log can no longer be read (its pods were deleted)."""

    def read(self, cursor=None, max_lines=5000):
        raise LogSourceUnavailable("the pods are gone")


@pytest.mark.parametrize("tail_lines", [20, 2], ids=["from the saved tail", "read again from the source"])
def test_a_death_between_saving_and_showing_loses_no_line_and_labels_the_lines_shown_again(tmp_path, shown,
                                                                                          tail_lines):
    options = FollowOptions(max_lines=4, poll_interval=0.01, tail_lines=tail_lines)
    log, messages = shown
    path = tmp_path / "job.log"
    path.write_text("".join(f"[rank 0] line {i}\n" for i in range(10)))
    source = FileLogSource(path)

    saved: list[dict] = []
    with pytest.raises(Died):  # the second batch's position is saved, the process dies before showing it
        asyncio.run(follow_async(Follower(options), log, source=source, on_progress=dying_after(2, saved)))
    assert numbers(messages) == [0, 1, 2, 3]
    assert saved[-1][SHOWING]["lines"] == 4
    assert ("cursor" in saved[-1][SHOWING]) is (tail_lines < 4), "a log position only where the tail is too short"

    messages.clear()
    # the restarted trigger; a batch that fits in the tail needs no log any more
    state = asyncio.run(show_again(saved[-1], Gone(path) if tail_lines >= 4 else source, log))
    assert SHOWING not in state
    assert numbers(messages, AGAIN) == [4, 5, 6, 7]
    assert "shown again" in messages[0]

    messages.clear()
    saved.clear()
    with pytest.raises(Died):  # third save: the round without lines that confirms the last batch
        asyncio.run(follow_async(Follower(options, state), log, source=source, on_progress=dying_after(2, saved)))
    assert numbers(messages) == [8, 9] and numbers(messages, AGAIN) == []
    assert SHOWING in saved[0] and SHOWING not in saved[1], "the next round confirms the batch shown"

    messages.clear()
    assert asyncio.run(show_again(saved[-1], source, log)) == saved[-1]
    assert messages == [], "a confirmed position shows nothing again"


def test_a_batch_that_cannot_be_read_again_is_named_not_hidden(tmp_path, shown):
    log, messages = shown
    state = {"seq": 3, "cursor": 10, "tail": [["rank 0", "line 9"]], SHOWING: {"cursor": 0, "lines": 2}}
    assert asyncio.run(show_again(state, Gone(tmp_path / "x"), log)) == {k: v for k, v in state.items() if k != SHOWING}
    assert messages == ["Could not show again the 2 lines being shown when the previous triggerer stopped "
                        "(the pods are gone): some of them may be missing above"]


class Stop(Exception):
    """Ends the follow loop from its hook once the hook has been seen."""


def test_the_step_hook_runs_off_the_event_loops_thread(tmp_path, shown):
    """A sync task's hook pushes XCom through Airflow's sync comms, which raise DeadlockImminentError on the
    thread of a running loop whenever another call holds the comms lock (Airflow 3.3,
    airflow/sdk/execution_time/comms.py ``send``): a sync MPIJob task that had succeeded failed so in CI."""
    log, _ = shown
    path = tmp_path / "job.log"
    path.write_text("[rank 0] line 0\n")
    on_loop: list[bool] = []

    def hook(step):
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        raise Stop

    with pytest.raises(Stop):
        asyncio.run(follow_async(Follower(FollowOptions(poll_interval=0.01)), log, source=FileLogSource(path),
                                 on_step=hook))
    assert on_loop == [False]


class Ended:
    """A backend whose job has ended: its statuses, and the heartbeat a follower owning the job renews."""

    resources_every_s = None  # never asked what its workers use (Backend.resource_use)

    async def statuses(self, name, interval):
        from airflow_ml_provider.jobs.state import JobState, JobStatus

        while True:
            yield JobStatus(JobState.SUCCEEDED)
            await asyncio.sleep(interval)

    def heartbeat(self, name):
        pass


@pytest.mark.parametrize("rules", [{}, {"succeed_on": ["line 2"]}], ids=["the job's end", "a rule's verdict"])
def test_the_last_batch_is_confirmed_after_its_lines_are_shown_and_before_the_loop_returns(tmp_path, shown, rules):
    """In a triggerer the trigger's end drops its log file, and lines still in flight go to the triggerer's own log:
    the final save (a round trip to the supervisor) comes after the lines are logged, also where the step that ends
    the loop shows lines itself (a rule's verdict), which a next round used to confirm, and none came."""
    log, messages = shown
    path = tmp_path / "job.log"
    path.write_text("".join(f"[rank 0] line {i}\n" for i in range(3)))
    saved: list[tuple[dict, int]] = []

    async def save(state):
        saved.append((state, len(numbers(messages))))

    options = FollowOptions(poll_interval=0.01, settle_s=0.0, rules=rules)
    step = asyncio.run(follow_async(Follower(options), log, Ended(), "job", FileLogSource(path), on_progress=save))
    assert step.action.value == "finish" and numbers(messages) == [0, 1, 2]
    (first, shown_then), (last, shown_at_last) = saved[0], saved[-1]
    assert SHOWING in first and shown_then == 0, "write-ahead: saved before the lines are shown"
    assert SHOWING not in last and shown_at_last == 3, "confirmed once they are shown, before the loop ends"
