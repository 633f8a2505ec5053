"""The deployment's cap on how many of a job's lines one task shows in its task log."""

from __future__ import annotations

from dataclasses import replace

from airflow.sdk import conf

from airflow_ml_provider.jobs.follow_options import FollowOptions

TASK_LOG_LINES = 10_000  # [ml_training] task_log_max_lines' default


def task_log_capped(follow: FollowOptions) -> FollowOptions:
    """``follow`` with ``[ml_training] task_log_max_lines`` as its ``task_log_lines`` (a task's own value
    may only lower it). Past it the follow core names the job's full log; metrics still read every line."""
    cap = conf.getint("ml_training", "task_log_max_lines", fallback=TASK_LOG_LINES)
    own = follow.task_log_lines
    return replace(follow, task_log_lines=cap if own is None else min(own, cap))
