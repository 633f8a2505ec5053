"""Clear means retrain (issue 25 D3): a trainer that counts its rounds in its checkpoint directory and
says where it started, so a test sees whether a new try resumed or trained from scratch; with the
``fail_at_round_5`` Param its first attempt fails after round 5 (a failed job, to be resumed)."""

from __future__ import annotations

from airflow.sdk import DAG, Param

from airflow_ml_provider.operators.training import TrainingJobOperator

_TRAIN = """
import json, os, pathlib, sys
checkpoints = pathlib.Path(os.environ["AIRFLOW_ML_CHECKPOINT_DIR"])
models = pathlib.Path(os.environ["AIRFLOW_ML_MODEL_DIR"])
checkpoints.mkdir(parents=True, exist_ok=True)
models.mkdir(parents=True, exist_ok=True)
state = checkpoints / "rounds"
done = int(state.read_text()) if state.exists() else 0
print(f"resuming after round {done}" if done else "training from scratch", flush=True)
for rounds in range(done + 1, 11):
    state.write_text(str(rounds))
    if rounds == 5 and sys.argv[1] == "True":
        sys.exit(3)
(models / "model.txt").write_text(f"trained rounds {done + 1}..10")
print(json.dumps({"event": "result", "first_round": done + 1}), flush=True)
print(json.dumps({"event": "model_saved", "path": str(models / "model.txt")}), flush=True)
"""

with DAG("ml_retrain_test", schedule=None, params={"fail_at_round_5": Param(False, type="boolean")}) as retrain_dag:
    TrainingJobOperator(task_id="train", command=["python", "-c", _TRAIN, "{{ params.fail_at_round_5 }}"],
                        num_workers=1, retries=0, job={"backend": "local"})
