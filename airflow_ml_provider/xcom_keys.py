"""The XCom keys a task instance of the provider saves and the training view reads, in one place: operators and
triggers write them, the view's plugin (a lower layer) reads them without importing either."""

TRAINING_VIEW = "ml_training_view"  # what the view shows while a task follows its job (reporting.live_view)
FOLLOW_STATE = "ml_follow_state"  # the follower's durable position, per task instance and try (triggers.durable)
TENSORBOARD_DIR = "ml_tensorboard_dir"  # the job's AIRFLOW_ML_TENSORBOARD_DIR, saved as the task follows it


def trial_view(number: int) -> str:
    """The XCom of a search's task instance that keeps trial ``number``'s job view."""
    return f"ml_trial_view_{int(number)}"
