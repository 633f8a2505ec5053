"""The follow core decides alone: lines, rules, metrics, settle, preemption, outage, deadline, paths."""

from __future__ import annotations

import json

from airflow_ml_provider.jobs.follow import Action, Follower, FollowOptions
from airflow_ml_provider.jobs.state import JobState, JobStatus
from airflow_ml_provider.logs.source import LogBatch, LogLine

RUNNING, SUCCEEDED = JobStatus(JobState.RUNNING), JobStatus(JobState.SUCCEEDED)
PREEMPTED = JobStatus(JobState.PREEMPTED, "rank 1 was killed by a signal")


def batch(*texts: str, cursor: int = 0, source: str = "rank 0") -> LogBatch:
    return LogBatch([LogLine(source, text) for text in texts], cursor)


def event(**fields) -> str:
    return json.dumps(fields)


def test_waits_while_running_and_reads_again_at_once_when_a_batch_was_full():
    follower = Follower(FollowOptions(poll_interval=2.0, max_lines=2))
    step = follower.observe(RUNNING, batch("a", "b", cursor=2), now=0)
    assert (step.action, step.delay, [line.text for line in step.lines]) == (Action.WAIT, 0.0, ["a", "b"])
    step = follower.observe(RUNNING, batch(cursor=2), now=1)
    assert (step.action, step.delay) == (Action.WAIT, 2.0)
    assert follower.cursor == 2


def test_a_terminal_status_finishes_only_after_an_empty_read():
    follower = Follower()
    step = follower.observe(SUCCEEDED, batch("last line", cursor=1), now=0)
    assert step.action is Action.WAIT and step.delay == 0.0  # lines came with the end: read once more
    assert follower.observe(SUCCEEDED, batch(cursor=1), now=0).action is Action.FINISH


def test_a_shipped_log_is_read_again_settle_s_after_the_job_ended():
    follower = Follower(FollowOptions(settle_s=5.0))
    step = follower.observe(SUCCEEDED, batch(cursor=0), now=100)
    assert (step.action, step.delay) == (Action.WAIT, 5.0)
    step = follower.observe(SUCCEEDED, batch("late", cursor=1), now=103)
    assert step.action is Action.WAIT and [line.text for line in step.lines] == ["late"]
    assert follower.observe(SUCCEEDED, batch(cursor=1), now=105.5).action is Action.FINISH


def test_fail_on_stops_at_the_matching_line_and_cancels_without_retry():
    follower = Follower(FollowOptions(rules={"fail_on": ["CUDA out of memory"], "retry_on": ["reset by peer"]}))
    step = follower.observe(RUNNING, batch("epoch 1", "CUDA out of memory", "never shown"), now=0)
    assert step.action is Action.FAIL and step.cancel and not step.retryable
    assert [line.text for line in step.lines] == ["epoch 1", "CUDA out of memory"]
    retry = Follower(FollowOptions(rules={"retry_on": ["reset by peer"]}))
    step = retry.observe(RUNNING, batch("Connection reset by peer"), now=0)
    assert step.action is Action.FAIL and step.cancel and step.retryable


def test_a_preempted_job_is_resubmitted_from_its_last_checkpoint_up_to_max_preemptions(tmp_path):
    root = str(tmp_path / "artifacts")
    follower = Follower(FollowOptions(max_preemptions=1, artifact_roots=(root,)))
    follower.observe(RUNNING, batch(event(event="checkpoint", path=f"{root}/ckpt-2", step=20, epoch=2)), now=0)
    step = follower.observe(PREEMPTED, batch(), now=1)
    assert step.action is Action.RESUBMIT
    assert (step.resume.path, step.resume.step, step.resume.epoch) == (f"{root}/ckpt-2", 20, 2)
    follower.resubmitted(new_log=True)
    assert follower.cursor is None  # the new attempt's log is read from its start
    assert follower.observe(RUNNING, batch(), now=2).action is Action.WAIT
    step = follower.observe(PREEMPTED, batch(), now=3)
    assert step.action is Action.FAIL and "preempted 2 time(s)" in step.message


def test_a_failed_job_fails_with_its_exit_codes_and_keeps_the_last_lines():
    follower = Follower(FollowOptions(tail_lines=2))
    follower.observe(RUNNING, batch("one", "two", "three"), now=0)
    step = follower.observe(JobStatus(JobState.FAILED, "rank 1 exited with code 3", {0: 0, 1: 3}), batch(), now=1)
    assert step.action is Action.FAIL and step.retryable
    assert "rank 1: 3" in step.message and "rank 1 exited with code 3" in step.message
    assert [line.text for line in follower.last_lines()] == ["two", "three"]


def test_the_last_lines_span_batches_and_a_rule_match_ends_them():
    follower = Follower(FollowOptions(tail_lines=3, rules={"fail_on": ["boom"]}))
    follower.observe(RUNNING, batch("a", "b"), now=0)
    follower.observe(RUNNING, batch("c"), now=1)
    assert [line.text for line in follower.last_lines()] == ["a", "b", "c"]
    follower.observe(RUNNING, batch("d", "boom", "never read"), now=2)
    assert [line.text for line in follower.last_lines()] == ["c", "d", "boom"]


def test_paths_from_log_lines_outside_the_artifact_roots_are_ignored_with_a_warning(tmp_path):
    root = str(tmp_path)
    follower = Follower(FollowOptions(artifact_roots=(root, "s3://bucket/jobs/j1")))
    step = follower.observe(RUNNING, batch(event(event="model_saved", path="/etc/passwd"),
                                           event(event="model_saved", path=f"{root}/../elsewhere/m.txt"),
                                           event(event="checkpoint", path="s3://bucket/jobs/j2/ckpt")), now=0)
    assert follower.model_path is None and follower.tracker.checkpoint is None
    assert len(step.warnings) == 3 and all("ignored" in warning for warning in step.warnings)
    follower.observe(RUNNING, batch(event(event="model_saved", path="s3://bucket/jobs/j1/model/m.txt")), now=1)
    assert follower.model_path == "s3://bucket/jobs/j1/model/m.txt"


def test_a_job_without_artifact_directories_may_report_no_path_at_all():
    """No directory of its own (a cluster backend, no artifact_root, no model_dir): a path a pod prints
    could name anything (another team's bucket), so it is ignored, and the warning says what to set."""
    follower = Follower(FollowOptions())
    step = follower.observe(RUNNING, batch(event(event="model_saved", path="s3://other-team/model"),
                                           event(event="checkpoint", path="/tmp/ckpt")), now=0)
    assert follower.model_path is None and follower.tracker.checkpoint is None
    assert len(step.warnings) == 2 and all("no artifact directory" in w and "artifact_root" in w for w in step.warnings)


def test_an_outage_backs_off_then_fails_retryably_after_the_grace_period():
    follower = Follower(FollowOptions(outage_grace_s=60, poll_interval=1.0))
    delays = [follower.unavailable("503", now=t).delay for t in (0, 1, 3)]
    assert delays == [1.0, 2.0, 4.0]
    assert "reachable again" in follower.observe(RUNNING, batch(), now=5).warnings[0]
    follower.unavailable("503", now=10)
    step = follower.unavailable("503", now=71)
    assert step.action is Action.FAIL and step.retryable and "longer than the 60 s grace period" in step.message


def test_the_deadline_stops_the_job():
    follower = Follower(FollowOptions(deadline=100.0))
    assert follower.observe(RUNNING, batch(), now=99).action is Action.WAIT
    step = follower.observe(RUNNING, batch(), now=100)
    assert step.action is Action.FAIL and step.cancel and step.timed_out


def test_a_follower_rebuilt_from_its_state_continues_with_the_same_series_and_position():
    first = Follower()
    first.observe(RUNNING, batch(event(event="metrics", step=1, loss=0.9), cursor=10), now=0)
    rebuilt = Follower(state=json.loads(json.dumps(first.state)))
    step = rebuilt.observe(RUNNING, batch(event(event="metrics", step=2, loss=0.5), cursor=20), now=1)
    assert rebuilt.cursor == 20 and rebuilt.seq == 2
    assert step.points == [("loss", 2, 0.5)]
    assert rebuilt.tracker.summary()["series"]["loss"] == [[1, 0.9], [2, 0.5]]


def test_succeed_on_finishes_a_log_only_follow():
    follower = Follower(FollowOptions(rules={"succeed_on": ["Training finished"]}))
    assert follower.observe(None, batch("epoch 1"), now=0).action is Action.WAIT
    assert follower.observe(None, batch("Training finished"), now=1).action is Action.FINISH


def test_a_vanished_job_fails_retryably_and_a_refusal_fails_for_good():
    assert Follower().vanished("gone").retryable
    step = Follower().refused("mpijobs.kubeflow.org is forbidden")
    assert step.action is Action.FAIL and not step.retryable and "forbidden" in step.message


def test_the_task_log_cap_shows_the_first_lines_once_says_where_the_rest_is_and_metrics_see_all():
    """Issue 38: ``task_log_lines`` bounds the lines shown, across batches and a rebuilt follower (a trigger's
    saved state); one warning names the full log; metrics, the tail and the end of the job see every line."""
    options = FollowOptions(task_log_lines=3, full_log="/ml/jobs/j/output.log")
    follower = Follower(options)
    first = follower.observe(RUNNING, batch(event(event="metrics", step=1, loss=1.0), "b", cursor=2), now=0)
    assert [line.text for line in first.lines][1:] == ["b"] and first.warnings == []
    rebuilt = Follower(options, follower.state)
    second = rebuilt.observe(SUCCEEDED, batch("c", "d", event(event="metrics", step=4, loss=0.25), cursor=5), now=0)
    assert [line.text for line in second.lines] == ["c"]
    assert second.warnings == ["The task log shows the first 3 lines of the job's log (task_log_lines); the rest "
                               "are in /ml/jobs/j/output.log. Metrics and log rules still read every line"]
    assert second.action is Action.WAIT and second.delay == 0.0, "lines came, withheld or not: read once more"
    third = rebuilt.observe(SUCCEEDED, batch("e", cursor=6), now=0)
    assert (third.lines, third.warnings) == ([], [])
    assert rebuilt.metrics == {"loss": 0.25} and rebuilt.last_lines()[-1].text == "e"
    assert (rebuilt.logged, rebuilt.withheld) == (3, 3)
    assert rebuilt.observe(SUCCEEDED, batch(cursor=6), now=0).action is Action.FINISH


def test_a_backends_count_of_settled_shards_is_a_line_at_most_every_ten_seconds_and_a_point_and_survives_a_restart():
    """An Indexed Job's shards counted from its status (no launcher prints a progress line): the count shown when
    it grew, at most every PROGRESS_S seconds and at the last, as a ``shards_done`` point the view and XCom see."""
    follower = Follower()

    def shown(done: int, now: float, follower=follower) -> list[str]:
        step = follower.observe(JobStatus(JobState.RUNNING, progress=(done, 12)), batch(), now)
        return [f"[{line.source}] {line.text}" for line in step.lines]

    assert shown(0, 100.0) == ["[backend] shards 0/12"]
    assert shown(3, 105.0) == [], "within 10 s of the last line"
    assert shown(6, 111.0) == ["[backend] shards 6/12  ETA 11 s"]  # 6 in 11 s: 6 more in 11 s
    resumed = Follower(state=json.loads(json.dumps(follower.state)))  # a restarted triggerer's follower
    assert shown(6, 125.0, resumed) == [], "no growth, no line"
    assert shown(12, 126.0, resumed) == ["[backend] shards 12/12"], "the last at once"
    assert resumed.tracker.metrics["shards_done"]["series"] == [[0, 0.0], [6, 6.0], [12, 12.0]]
