"""The follow core and a queue (Kueue): state lines logged once and on a new reason, an eviction the
queue takes back waited through (never resubmitted), and max_queue_s."""

from __future__ import annotations

from airflow_ml_provider.jobs.follow import Action, Follower, FollowOptions
from airflow_ml_provider.jobs.state import REQUEUED, JobState, JobStatus
from airflow_ml_provider.logs.source import LogBatch, LogLine

NO_QUOTA = JobStatus(JobState.QUEUED, "Pending: insufficient quota for nvidia.com/gpu in flavor spot")
LESS = JobStatus(JobState.QUEUED, "Pending: insufficient quota for nvidia.com/gpu in flavor spot, 8 more needed")
EVICTED = JobStatus(JobState.PREEMPTED, "evicted by Kueue (Preempted: ...); requeued", reason=REQUEUED)
CHECKPOINT = '{"event": "checkpoint", "step": 44, "path": "/ckpt/ckpt-000002.npz"}'


def _batch(*texts: str) -> LogBatch:
    return LogBatch([LogLine("launcher", text) for text in texts], len(texts))


def test_each_state_and_each_new_queue_reason_is_logged_once():
    follower = Follower()
    statuses = [NO_QUOTA, NO_QUOTA, LESS, LESS, JobStatus(JobState.RUNNING, "1 pod(s) active"),
                JobStatus(JobState.RUNNING, "2 pod(s) active"), EVICTED, EVICTED, JobStatus(JobState.RUNNING, "x")]
    logged = [event for n, status in enumerate(statuses) for event in follower.observe(status, None, n).events]
    assert logged == [f"Job is QUEUED: {NO_QUOTA.message}", f"Job is QUEUED: {LESS.message}",
                      "Job is RUNNING: 1 pod(s) active", f"Job is PREEMPTED: {EVICTED.message}", "Job is RUNNING: x"]
    again = Follower(state=follower.state)  # a triggerer restart does not log the current state again
    assert again.observe(JobStatus(JobState.RUNNING, "x"), None, 10).events == []


def test_an_eviction_the_queue_takes_back_is_waited_through_with_the_checkpoint_kept(tmp_path):
    follower = Follower(FollowOptions(max_preemptions=0, artifact_roots=("/ckpt",)))
    follower.observe(JobStatus(JobState.RUNNING), _batch(CHECKPOINT), 0)
    for now in range(1, 5):  # however long Kueue keeps it evicted: never resubmitted, never failed
        assert follower.observe(EVICTED, _batch(), now).action is Action.WAIT
    assert follower.preemptions == 0 and follower.tracker.checkpoint["path"] == "/ckpt/ckpt-000002.npz"
    assert follower.observe(JobStatus(JobState.SUCCEEDED), _batch(), 9).action is Action.FINISH


def test_max_queue_s_stops_the_job_with_the_queues_last_reason():
    follower = Follower(FollowOptions(max_queue_s=30))
    assert follower.observe(NO_QUOTA, None, 100).action is Action.WAIT
    assert follower.observe(LESS, None, 129).action is Action.WAIT  # a new reason is the same wait
    step = follower.observe(LESS, None, 130)
    assert step.action is Action.FAIL and step.cancel and not step.retryable
    assert step.message == ("the job was not admitted by its queue within max_queue_s (30 s); the queue's last "
                            f"reason: {LESS.message}")


def test_max_queue_s_counts_each_wait_for_admission_on_its_own():
    follower = Follower(FollowOptions(max_queue_s=30))
    follower.observe(NO_QUOTA, None, 0)
    follower.observe(JobStatus(JobState.RUNNING), None, 20)  # admitted after 20 s
    assert follower.observe(EVICTED, None, 100).action is Action.WAIT  # requeued: a new wait starts
    assert follower.observe(EVICTED, None, 129).action is Action.WAIT
    assert follower.observe(EVICTED, None, 130).action is Action.FAIL
