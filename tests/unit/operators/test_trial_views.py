"""A search's trial views (reporting.live_view.trial_views): each trial's job followed by a real follow core,
saved as the search task instance's XCom ml_trial_view_<number> at its first step, at each change of the job's
state, every 15 s in between (not at every step), and at the trial's end (``end``, which a pruned trial's job
state does not mark)."""

from __future__ import annotations

from airflow_ml_provider.jobs.follow import Follower, FollowOptions
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState, JobStatus
from airflow_ml_provider.reporting.live_view import TRIAL_SAVE_EVERY_S, trial_views
from airflow_ml_provider.xcom_keys import trial_view


class TaskInstance:
    """What the views need of a task instance: ``xcom_push``, kept here to be read back."""

    def __init__(self):
        self.pushed: list[tuple[str, dict]] = []

    def xcom_push(self, key, value):
        self.pushed.append((key, value))


class Step:
    def __init__(self, state):
        self.status, self.events, self.points = JobStatus(state), (), ()


def test_a_trial_view_is_saved_on_changes_every_15_s_and_at_its_end(tmp_path):
    ti, now = TaskInstance(), [1000.0]
    spec = TrainingJobSpec(framework="generic", command=["python", "-c", "pass", "--epochs", "3"], num_workers=1,
                           checkpoint_dir=str(tmp_path / "ckpt"))
    view = trial_views(ti, "local")(7, "aml-trial-7", spec, Follower(FollowOptions()))
    view.clock = lambda: now[0]
    assert TRIAL_SAVE_EVERY_S == 15.0 and trial_view(7) == "ml_trial_view_7"
    view(Step(JobState.RUNNING))
    for now[0] in (1005.0, 1014.0):
        view(Step(JobState.RUNNING))
    assert len(ti.pushed) == 1
    now[0] = 1015.0
    view(Step(JobState.RUNNING))
    now[0] = 1016.0
    view.end()
    assert [key for key, _ in ti.pushed] == ["ml_trial_view_7"] * 3
    last = ti.pushed[-1][1]
    assert last["job"] == "aml-trial-7" and last["backend"] == "local" and last["state"] == "RUNNING"
    assert last["plan"] == {"unit": "epoch", "total": 3} and last["updated"] == 1016.0
    assert last["tensorboard_dir"] == str(tmp_path / "ckpt" / "tensorboard")
