"""The normalized state machine: which states end a job, and a lossless round trip."""

from __future__ import annotations

from airflow_ml_provider.jobs.state import NEVER_LAUNCHED, JobState, JobStatus


def test_terminal_states_are_exactly_the_ends():
    terminal = {state for state in JobState if state.is_terminal}
    assert terminal == {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.PREEMPTED}


def test_status_round_trips_through_json_types():
    status = JobStatus(JobState.FAILED, "rank 1 exited with code 3", {0: 143, 1: 3}, reason=NEVER_LAUNCHED)
    assert JobStatus.from_dict(status.to_dict()) == status
    assert status.to_dict()["exit_codes"] == {"0": 143, "1": 3}
    assert status.to_dict()["reason"] == "NeverLaunched"


def test_a_status_recorded_before_reasons_existed_still_loads():
    old = {"state": "FAILED", "message": "the job was never launched: its submitter died mid-submit", "exit_codes": {}}
    assert JobStatus.from_dict(old) == JobStatus(JobState.FAILED, old["message"])
    assert JobStatus.from_dict(old).reason == ""
