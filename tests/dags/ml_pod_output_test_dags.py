"""Jobs whose output is hostile or huge (a pod's output is not trusted): the follower, XCom, MLflow and
the search take only what is bounded and typed (tests/integration/operators/test_pod_output.py)."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG

from airflow_ml_provider.operators.evaluate import EvaluateModelOperator
from airflow_ml_provider.operators.search import HyperparameterSearchOperator
from airflow_ml_provider.operators.training import TrainingJobOperator

PY = "python"

# Issue 19, M2: each of these lines crashed the follower, Optuna or MLflow; good lines follow them.
HOSTILE = r"""
import json, os
def say(**fields): print(json.dumps({"event": "metrics", **fields}), flush=True)
print('{"event": "metrics", "step": 1, "loss": ' + "[" * 2000 + "]" * 2000 + "}", flush=True)
say(step=-1, loss=0.9)
say(step=10**30, loss=0.9)
say(step=1, **{"../../x": 1.0, "a b": 2.0})
for step in (1, 2, 3):
    say(step=step, loss=1.0 / step, auc=0.5 + step / 10)
print(json.dumps({"event": "model_saved", "path": os.environ["AIRFLOW_ML_MODEL_DIR"] + "/model.txt"}), flush=True)
print(json.dumps({"event": "result", "auc": 0.8, "bad name": 1}), flush=True)
"""

EVALUATE = r"""
import json
print(json.dumps({"event": "result", "model_sha256": "0" * 64, "n_features": 3, "n_classes": 2, "auc": 0.75}))
"""

with DAG("ml_test_hostile_metrics", schedule=None, catchup=False, tags=["test"],
         default_args={"retries": 0}) as hostile_metrics:
    train = TrainingJobOperator(task_id="train", command=[PY, "-c", HOSTILE], num_workers=1, follow={"poll_interval": 0.5})
    TrainingJobOperator(task_id="train_deferred", command=[PY, "-c", HOSTILE], num_workers=1, follow={"poll_interval": 0.5},
                        deferrable=True)
    train >> EvaluateModelOperator(task_id="evaluate", training="train", test_data="unused.npz",
                                   command=[PY, "-c", EVALUATE], follow={"poll_interval": 0.5})

# Issue 19, M3: 2,000 lines x 50 metric names (25 kept all along, 25 new on every line), long names, the
# largest steps, a result line at its bounds and long lines at the end: whatever a job prints, the saved
# follower state and the XCom row stay under 1 MiB.
VOLUME = r"""
import json, os, random
rand = random.Random(0)
fixed = [f"{'a' * 120}_{j:03d}" for j in range(25)]
for i in range(2000):
    values = {name: rand.random() for name in fixed}
    values.update({f"{'b' * 115}_{i:04d}_{j:02d}": rand.random() for j in range(25)})
    print(json.dumps({"event": "metrics", "step": (2**63 - 2001 + i), **values}), flush=True)
print(json.dumps({"event": "model_saved", "path": os.environ["AIRFLOW_ML_MODEL_DIR"] + "/model.txt"}), flush=True)
# a result line of 70 values (64 kept), just under the launcher's 64 KiB line split
print(json.dumps({"event": "result", **{f"r{k:02d}" + "c" * 120: "v" * 700 for k in range(70)}}), flush=True)
for i in range(25):
    print("x" * 100_000, flush=True)
"""

with DAG("ml_test_metric_volume", schedule=None, catchup=False, tags=["test"],
         default_args={"retries": 0, "retry_delay": timedelta(seconds=0)}) as metric_volume:
    TrainingJobOperator(task_id="chatty", command=[PY, "-c", VOLUME], num_workers=1, follow={"poll_interval": 0.5},
                        deferrable=True)

# Issue 19, M2: a trial's "step": -1 raised in Optuna and failed the whole search, leaving the other
# trials' jobs running. Each trial prints the hostile lines, then its objective at steps 1 and 2.
HOSTILE_TRIAL = r"""
import json, sys
x = float(sys.argv[1])
def say(**fields): print(json.dumps({"event": "metrics", **fields}), flush=True)
print('{"event": "metrics", "step": 1, "auc": ' + "[" * 2000 + "]" * 2000 + "}", flush=True)
say(step=-1, auc=0.9)
say(step=10**30, auc=0.9)
say(step=1, auc=x / 2)
say(step=2, auc=x)
print(json.dumps({"event": "result", "auc": x}), flush=True)
"""

with DAG("ml_test_search_hostile_line", schedule=None, catchup=False, tags=["test"],
         default_args={"retries": 0}) as search_hostile_line:
    for deferrable in (False, True):
        HyperparameterSearchOperator(
            task_id="search_deferred" if deferrable else "search",
            trial={"framework": "generic", "num_workers": 1,
                   "command": ["python", "-c", HOSTILE_TRIAL, "{{ params.x }}"]},
            search_space={"x": [0.2, 0.4, 0.6]},
            search={"sampler": "grid", "max_parallel": 3, "pruner": "none", "poll_interval": 0.2},
            backend="local",
            deferrable=deferrable,
        )

# Issue 18, Paths: a job makes a symlink inside its own model directory pointing at /etc/passwd and
# reports it as its model (the lexical check accepted it); evaluation prints the model it was given.
SYMLINK_MODEL = r"""
import json, os
model_dir = os.environ["AIRFLOW_ML_MODEL_DIR"]
os.makedirs(model_dir, exist_ok=True)
os.symlink("/etc/passwd", os.path.join(model_dir, "model.txt"))
print(json.dumps({"event": "model_saved", "path": os.path.join(model_dir, "model.txt")}), flush=True)
print(json.dumps({"event": "result", "auc": 0.9}), flush=True)
"""

SHOW_MODEL = r"""
import json, sys
print("evaluating" + " model " + sys.argv[sys.argv.index("--model") + 1], flush=True)  # split: not in the argv shown
print(json.dumps({"event": "result", "model_sha256": "0" * 64, "n_features": 3, "n_classes": 2, "auc": 0.7}))
"""

with DAG("ml_test_symlink_model", schedule=None, catchup=False, tags=["test"],
         default_args={"retries": 0}) as symlink_model:
    symlink_train = TrainingJobOperator(task_id="train", command=[PY, "-c", SYMLINK_MODEL], num_workers=1,
                                        follow={"poll_interval": 0.5})
    symlink_train >> EvaluateModelOperator(task_id="evaluate", training="train", test_data="unused.npz",
                                           command=[PY, "-c", SHOW_MODEL], follow={"poll_interval": 0.5})

# The local backend's log read from Elasticsearch keeps to the local jobs' namespace: a document of
# another namespace with this job's label (a fail_on line) must not fail the task. The job waits for
# the test to have planted it (GATE_NAME, in the local root's data folder) before it ends. The data
# folder is what every local job's sandbox shows of the root; the job finds it from its model directory
# (<root>/artifacts/<job>/model), since its /tmp is its own and $AIRFLOW_HOME is hidden.
GATE_NAME = "es-namespace-gate"
WAIT_FOR_GATE = r"""
import json, os, sys, time
gate = os.path.normpath(os.path.join(os.environ["AIRFLOW_ML_MODEL_DIR"], "..", "..", "..", "data", sys.argv[1]))
while not os.path.exists(gate):
    time.sleep(0.1)
print(json.dumps({"event": "result", "auc": 0.9}), flush=True)
"""

with DAG("ml_test_es_local_namespace", schedule=None, catchup=False, tags=["test"],
         default_args={"retries": 0}) as es_local_namespace:
    TrainingJobOperator(task_id="train", command=[PY, "-c", WAIT_FOR_GATE, GATE_NAME], num_workers=1,
                        elasticsearch_conn_id="es_logs_ns", follow={"rules": {"fail_on": [r"CUDA out of memory"]}, "poll_interval": 0.2})

# Issue 19: a wrong S3 artifact root fails the task before any job starts, naming the root and the
# connection (tests/integration/storage/test_storage_errors.py sets the connections).
with DAG("ml_test_wrong_artifact_root", schedule=None, catchup=False, tags=["test"],
         default_args={"retries": 0}) as wrong_artifact_root:
    TrainingJobOperator(task_id="train", command=[PY, "-c", "print('never runs')"], num_workers=1)

# Issue 38: terminal escapes in a job's lines (an OSC 52 clipboard write, a screen clear, a carriage return,
# and the same as JSON escapes in a result line) reach the task log, XCom and MLflow as visible text only.
ESCAPES = r"""
import json
print("copy " + "\x1b]52;c;ZWNobyBwd25lZA==\x07" + " done", flush=True)
print("\x1b[2J\x1b[31mcleared" + "\r" + "hidden", flush=True)
print(json.dumps({"event": "result", "note": "\x1b]52;c;ZWNobyBwd25lZA==\x07", "auc": 0.9}), flush=True)
"""
EVALUATE_ESCAPES = r"""
import json
print(json.dumps({"event": "result", "model_sha256": "\x1b]52;c;ZWNobyBwd25lZA==\x07", "n_features": 3,
                  "n_classes": 2, "auc": 0.75}), flush=True)
"""

with DAG("ml_test_terminal_escapes", schedule=None, catchup=False, tags=["test"],
         default_args={"retries": 0}) as terminal_escapes:
    escapes = TrainingJobOperator(task_id="train", command=[PY, "-c", ESCAPES], num_workers=1,
                                  follow={"poll_interval": 0.5})
    TrainingJobOperator(task_id="train_deferred", command=[PY, "-c", ESCAPES], num_workers=1,
                        follow={"poll_interval": 0.5}, deferrable=True)
    escapes >> EvaluateModelOperator(task_id="evaluate", training="train", test_data="unused.npz",
                                     command=[PY, "-c", EVALUATE_ESCAPES], follow={"poll_interval": 0.5})

# Issue 38: 2,000 metric lines made a 13.5 MB task log. A job printing more lines than the task log cap
# ([ml_training] task_log_max_lines, set small by the test) shows the first ones only, then where the rest is.
MANY_LINES = r"""
import json
for step in range(1, 301):
    print(json.dumps({"event": "metrics", "step": step, "loss": 1.0 / step}), flush=True)
print(json.dumps({"event": "result", "auc": 0.9}), flush=True)
"""

with DAG("ml_test_task_log_cap", schedule=None, catchup=False, tags=["test"],
         default_args={"retries": 0}) as task_log_cap:
    TrainingJobOperator(task_id="train", command=[PY, "-c", MANY_LINES], num_workers=1,
                        follow={"poll_interval": 0.5, "max_lines": 40})
    TrainingJobOperator(task_id="train_deferred", command=[PY, "-c", MANY_LINES], num_workers=1,
                        follow={"poll_interval": 0.5, "max_lines": 40}, deferrable=True)
