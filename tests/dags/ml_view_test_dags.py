"""What the training view shows of real runs (tests/integration/plugins): a LightGBM job followed by its task (the
view's own XCom) and a job followed in the triggerer (the follow core's durable state)."""

from __future__ import annotations

import os
from pathlib import Path

from airflow.sdk import DAG, task

from airflow_ml_provider.operators.training import LightGBMTrainingOperator, TrainingJobOperator

# ...then it spins 4 s, past the launcher's first resources sample (jobs.backends.local.resources)
_METRICS = ("import json, time\nprint('<script>alert(1)</script>', flush=True)\nfor step in range(1, 4):\n"
            "    print(json.dumps({'event': 'metrics', 'step': step, 'loss': 1.0 / step}), flush=True)\n"
            "end = time.monotonic() + 4\nwhile time.monotonic() < end: pass\n")

# A job that writes its own event file (as any job may) with a tag that is markup: it must show as text in the view
# (the bundled trainers' writer, tensorboardX's add_scalar, would rename such a tag)
HOSTILE_TAG = "<img src=x onerror=alert(1)>"
_TAGS = ("import os\nfrom tensorboardX import SummaryWriter\nfrom tensorboardX.proto import summary_pb2\n"
         "writer = SummaryWriter(os.environ['AIRFLOW_ML_TENSORBOARD_DIR'])\nfor step in (1, 2):\n"
         f"    value = summary_pb2.Summary.Value(tag={HOSTILE_TAG!r}, simple_value=2.0 * step)\n"
         "    writer._get_file_writer().add_summary(summary_pb2.Summary(value=[value]), step)\nwriter.close()\n")

with DAG("ml_view_test", schedule=None, catchup=False, tags=["test"]) as view_dag:

    @task
    def view_data() -> dict[str, str]:
        from airflow_ml_provider.runtime.datasets import write_synthetic

        out = Path(os.environ["AIRFLOW_HOME"]) / "ml" / "data" / "view-test"  # the local root's data/: jobs see it
        out.mkdir(parents=True, exist_ok=True)
        write_synthetic(out / "train.npz", out / "valid.npz", rows=5000, features=10, seed=5)
        return {"train": str(out / "train.npz"), "valid": str(out / "valid.npz")}

    view_data() >> LightGBMTrainingOperator(
        task_id="lightgbm", train_data="{{ ti.xcom_pull('view_data')['train'] }}",
        valid_data="{{ ti.xcom_pull('view_data')['valid'] }}",
        lightgbm_params={"objective": "binary", "learning_rate": 0.1, "num_leaves": 15, "seed": 0},
        num_boost_round=30, num_workers=2, retries=0)
    TrainingJobOperator(task_id="deferred", command=["python", "-c", _METRICS], deferrable=True,
                        follow={"poll_interval": 0.5}, retries=0)
    TrainingJobOperator(task_id="tensorboard_tags", command=["python", "-c", _TAGS], retries=0)
