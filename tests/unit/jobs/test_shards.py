"""The sharded job's queue and plan (jobs.shards): who runs which shard, retries, what a job's result says."""

from __future__ import annotations

import pytest

from airflow_ml_provider.jobs.shards import ShardPlan, ShardQueue, progress
from airflow_ml_provider.jobs.spec import SpecError, TrainingJobSpec


def test_each_shard_is_handed_out_once_in_order_and_settled_by_its_own_worker():
    queue = ShardQueue(3)
    assert queue.take(0) == (0, 1) and queue.take(1) == (1, 1)
    assert queue.report(1, 0, "done") == "worker 1 reported shard 0, which it was not running"
    assert queue.report(0, 0, "done", rows=5) is None
    assert queue.report(1, 1, "skipped") is None
    assert queue.take(0) == (2, 1) and queue.take(1) is None
    assert queue.report(0, 2, "done", rows=7) is None
    assert queue.finished and queue.result() == {
        "shards": 3, "shards_done": 3, "shards_ran": 2, "shards_skipped": 1, "shards_retried": 0, "shards_failed": 0,
        "failed_shards": [], "rows": 12}


def test_a_failing_shard_is_retried_at_the_end_then_counts_as_failed():
    queue = ShardQueue(2, max_attempts=2, max_failed_shards=0)
    queue.take(0)
    queue.report(0, 0, "failed", error="boom")
    assert list(queue.pending) == [1, 0] and not queue.failed
    assert queue.take(0) == (1, 1)
    queue.report(0, 1, "done")
    assert queue.take(0) == (0, 2)
    queue.report(0, 0, "failed", error="boom again")
    assert queue.failed == [0] and queue.too_many_failed and queue.last_failure[0] == "boom again"
    assert queue.result()["failed_shards"] == [0] and queue.result()["shards_retried"] == 1


def test_a_worker_killed_from_outside_gives_its_shard_back_without_spending_a_try():
    queue = ShardQueue(2, max_attempts=1)
    queue.take(0)
    queue.take(1)
    assert queue.lost(1, "killed", counts=False) == 1
    queue.report(0, 0, "done")
    assert queue.take(0) == (1, 1), "the lost shard's try was given back"
    assert queue.lost(0, "crashed", counts=True) == 1 and queue.failed == [1]


def test_a_worker_cannot_take_a_second_shard_nor_report_an_unknown_state():
    queue = ShardQueue(2)
    queue.take(0)
    with pytest.raises(ValueError, match="still runs shard 0"):
        queue.take(0)
    assert "as 'won'" in queue.report(0, 0, "won")
    assert queue.report(0, True, "done") is not None, "a bool is no shard index"


def test_the_progress_line_says_shards_rows_rate_and_eta():
    queue = ShardQueue(10_000)
    queue.ran, queue.rows = 4_210, 8_100_000
    line = progress(queue, 3506.5)
    assert line.startswith("shards 4,210/10,000  rows 8.1M  2,310 rows/s  ETA ")
    assert line.endswith("ETA 80 min")


def test_a_plan_has_one_input_list_per_shard_and_its_output_is_the_jobs_own():
    with pytest.raises(ValueError, match="2 lists for 3 shards"):
        ShardPlan(count=3, inputs=[["/d/a"], ["/d/b"]], output="/o")
    spec = dict(framework="generic", command=["x"], num_workers=2, model_dir="/a/model")
    assert TrainingJobSpec(**spec, shards={"count": 3, "output": "/a/model/shards"}).shards.count == 3
    with pytest.raises(SpecError, match="shards.output: '/a/model/../other' is not a directory the job writes"):
        TrainingJobSpec(**spec, shards={"count": 3, "output": "/a/model/../other"})
    with pytest.raises(SpecError, match="framework 'generic'"):
        TrainingJobSpec(**{**spec, "framework": "lightgbm"}, shards={"count": 3, "output": "/a/model/s"})


@pytest.mark.parametrize("kind", ["mpijob", "volcano", "trainjob"])
def test_the_other_cluster_backends_refuse_a_sharded_job_naming_the_backends_that_run_one(kind):
    from airflow_ml_provider.jobs.backends import get_backend, sharding_backends
    from airflow_ml_provider.jobs.backends.base import JobSubmissionError

    assert sharding_backends() == ["local", "indexed-job"]
    spec = TrainingJobSpec(framework="generic", command=["score"], num_workers=2, image="img:1", model_dir="s3://b/m",
                           shards={"count": 100, "output": "s3://b/m/shards"})
    backend = get_backend(kind, api_client=None, namespace="ml", **({"training_runtime": "rt"} if kind == "trainjob" else {}))
    with pytest.raises(JobSubmissionError, match=f"^shards: the {kind} backend does not run sharded jobs; backends "
                                                 "that do: local, indexed-job$"):
        backend.render("job", spec, {})
