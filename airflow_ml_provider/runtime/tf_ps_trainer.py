"""Parameter-server trainer (framework ``tensorflow-ps``): a softmax classifier of the digits, or of the pipeline's
.npz/.csv data, trained with ``ParameterServerStrategy`` and ``ClusterCoordinator``.

Every process of the job runs this module; its ``TF_CONFIG`` (set by the backend from the job's roles) says
which task it is. A ``ps`` or ``worker`` task serves ``tf.distribute.Server`` until the job stops it; the
``chief`` builds the variables (placed on the parameter servers), schedules training steps on the workers
and logs the metrics, checkpoints and result lines of the other bundled trainers. The loop is a custom one:
Keras 3 does not run ``model.fit`` under ``ParameterServerStrategy`` (keras-team/keras#18624).

A worker that is lost mid-run costs nothing but its speed: ``ClusterCoordinator`` runs the steps it had on
the workers left. A parameter server lost fails the chief (its variables are gone); a resubmitted job
resumes from the chief's newest checkpoint (``tf.train.Checkpoint`` files in ``AIRFLOW_ML_CHECKPOINT_DIR``,
or ``AIRFLOW_ML_RESUME_FROM``), never training its steps again.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import socket
import sys
import time

import numpy as np

from airflow_ml_provider.artifact_layout import join
from airflow_ml_provider.runtime import storage
from airflow_ml_provider.runtime.checkpoints import RESUME_ENV, add_keep_argument, announce_resume
from airflow_ml_provider.runtime.datasets import load_digits_split, load_npz_or_csv
from airflow_ml_provider.runtime.metrics_log import StepLines, emit, emit_metrics, worker_env
from airflow_ml_provider.runtime.quiet import quiet_startup

MODEL_FILE = "model.npz"
SERVER_TASKS = ("ps", "worker")
CHIEF_CHECK_S, CHIEF_MISSES = 5.0, 3  # a server stops 15 s after the chief stopped listening


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = worker_env()
    parser = argparse.ArgumentParser(prog="python -m airflow_ml_provider.runtime.tf_ps_trainer")
    parser.add_argument("--steps", type=int, default=200, help="training steps in all (a resumed job continues)")
    parser.add_argument("--batch-size", type=int, default=64, help="examples per step")
    parser.add_argument("--learning-rate", type=float, default=0.5)
    parser.add_argument("--log-every", type=int, default=10, help="steps between metrics lines")
    parser.add_argument("--checkpoint-every", type=int, default=50, help="steps between the chief's checkpoints")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-dir", default=env.model_dir, help=f"where the chief saves {MODEL_FILE}")
    parser.add_argument("--checkpoint-dir", default=env.checkpoint_dir, help="the chief's checkpoints; resume")
    add_keep_argument(parser)
    parser.add_argument("--train-data", help=".npz/.csv file or shard directory instead of the bundled digits")
    parser.add_argument("--test-data", help="held-out .npz/.csv for the final result (with --train-data)")
    args = parser.parse_args(argv)
    for name in ("steps", "batch_size", "log_every", "checkpoint_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def task() -> tuple[str, int]:
    """This process's task type and index, from ``TF_CONFIG``."""
    try:
        config = json.loads(os.environ["TF_CONFIG"])
        return str(config["task"]["type"]), int(config["task"]["index"])
    except (KeyError, ValueError, TypeError):
        raise SystemExit("tf_ps_trainer: error: TF_CONFIG with the job's cluster and this task is not set "
                         "(run it as a tensorflow-ps job)") from None


def serve(tf, task_type: str, index: int) -> None:
    """Run this ps or worker task's server until the job stops it, or the chief is gone (``until_gone``)."""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    cluster = resolver.cluster_spec()
    server = tf.distribute.Server(cluster, job_name=task_type, task_index=index, protocol="grpc", start=True)
    print(f"{task_type} {index} serving at {cluster.task_address(task_type, index)}", flush=True)
    until_gone(cluster.task_address("chief", 0))
    print(f"{task_type} {index}: the chief is gone; stopping", flush=True)
    del server  # (held, serving, until here)


def until_gone(address: str, period_s: float = CHIEF_CHECK_S, misses: int = CHIEF_MISSES) -> None:
    """Return once the chief at ``address`` (``host:port``), having listened, no longer does ``misses`` times in a
    row. A server never ends by itself (``Server.join`` waits for ever), so on a cluster the parameter servers'
    and workers' pods would outlive the chief's end (an Indexed Job per role); this ends them with it."""
    host, _, port = address.rpartition(":")
    seen, missed = False, 0
    while not seen or missed < misses:
        try:
            socket.create_connection((host, int(port)), timeout=period_s).close()
            seen, missed = True, 0
        except OSError:
            missed += seen
        time.sleep(period_s)


def _data(args: argparse.Namespace):
    if args.train_data:
        X, y = load_npz_or_csv(args.train_data)
        test = load_npz_or_csv(args.test_data) if args.test_data else (X, y)
        return X.astype(np.float32), y.astype(np.int64), test[0].astype(np.float32), test[1].astype(np.int64)
    X, y, X_test, y_test = load_digits_split(args.seed)
    return X, y.astype(np.int64), X_test, y_test.astype(np.int64)


def train(tf, args: argparse.Namespace) -> None:
    """The chief: variables on the parameter servers, steps scheduled on the workers, checkpoints and lines."""
    X, y, X_test, y_test = _data(args)
    classes = int(max(y.max(), y_test.max())) + 1
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        weights = tf.Variable(tf.zeros([X.shape[1], classes]), name="weights")
        bias = tf.Variable(tf.zeros([classes]), name="bias")
        step = tf.Variable(0, dtype=tf.int64, name="step")
    checkpoint = tf.train.Checkpoint(weights=weights, bias=bias, step=step)
    manager = (tf.train.CheckpointManager(checkpoint, args.checkpoint_dir, max_to_keep=args.keep_checkpoints or None)
               if args.checkpoint_dir else None)
    done = _resume(tf, checkpoint, manager, step)

    def dataset_fn():
        data = tf.data.Dataset.from_tensor_slices((X, y)).shuffle(len(y), seed=args.seed)
        return data.repeat().batch(args.batch_size, drop_remainder=True)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def step_fn(batches):
        features, labels = next(batches)
        with tf.GradientTape() as tape:
            logits = tf.matmul(features, weights) + bias
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        grad_w, grad_b = tape.gradient(loss, [weights, bias])
        weights.assign_sub(args.learning_rate * grad_w)
        bias.assign_sub(args.learning_rate * grad_b)
        return loss

    lines = StepLines()  # (every --log-every steps, throttled as the other bundled trainers' step lines)
    while done < args.steps:
        chunk = min(args.log_every, args.steps - done)
        losses = [coordinator.schedule(step_fn, args=(iterator,)) for _ in range(chunk)]
        coordinator.join()
        done += chunk
        if lines.due(last=done == args.steps):
            emit_metrics(step=done, loss=float(np.mean([value.fetch() for value in losses])))
        if manager is not None and (done % args.checkpoint_every == 0 or done == args.steps):
            step.assign(done)
            emit("checkpoint", path=manager.save(checkpoint_number=done), step=done)
    _finish(args, weights.numpy(), bias.numpy(), X_test, y_test)


def _resume(tf, checkpoint, manager, step) -> int:
    """The steps done by the checkpoint this job continues from (``AIRFLOW_ML_RESUME_FROM``, else the newest
    in the checkpoint directory), restored into the variables; 0 when there is none."""
    requested = os.environ.get(RESUME_ENV)
    found = (requested, RESUME_ENV) if requested and tf.io.gfile.exists(requested + ".index") else None
    if requested and found is None:
        print(f"{RESUME_ENV}={requested} does not exist; looking for the latest checkpoint instead",
              file=sys.stderr, flush=True)
    if found is None and manager is not None and manager.latest_checkpoint:
        found = (manager.latest_checkpoint, f"latest checkpoint in {manager.directory}")
    if found is None:
        return 0
    checkpoint.restore(found[0]).assert_existing_objects_matched()
    done = int(step.numpy())
    announce_resume(*found, step=done)
    return done


def _finish(args: argparse.Namespace, weights: np.ndarray, bias: np.ndarray, X_test, y_test) -> None:
    """The chief's model (``model.npz``: the weights and bias, arrays only) and its held-out accuracy."""
    if args.model_dir:
        def write(local: str) -> None:
            buffer = io.BytesIO()
            np.savez(buffer, weights=weights, bias=bias)
            with open(local, "wb") as f:
                f.write(buffer.getvalue())
        emit("model_saved", path=storage.write_atomic(join(args.model_dir, MODEL_FILE), write, ".npz"))
    predicted = np.argmax(X_test @ weights + bias, axis=1)
    emit("result", accuracy=float(np.mean(predicted == y_test)))


class _SaverRetracing(logging.Filter):
    """TensorFlow's saver makes its tf.function anew at every save, then warns the chief's log about the retracing
    at each checkpoint (``MultiDeviceSaver.save.<locals>.tf_function_save``): dropped, any other warning kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "MultiDeviceSaver.save.<locals>" not in record.getMessage()


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    task_type, index = task()
    with quiet_startup():
        import tensorflow as tf
    tf.get_logger().addFilter(_SaverRetracing())
    if task_type in SERVER_TASKS:
        serve(tf, task_type, index)
    elif task_type == "chief":
        train(tf, args)
    else:
        print(f"tf_ps_trainer: error: task type {task_type!r} is not chief, ps or worker", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
