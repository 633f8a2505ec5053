"""Horovod data-parallel Keras 3 trainer (digits MLP) with per-epoch checkpoints and resume.

Keras 3 does not work with ``horovod.tensorflow.keras``, so this uses ``horovod.tensorflow`` directly
and hands Horovod the underlying ``tf.Variable`` of each Keras variable (``v.value``).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import re

import numpy as np

from airflow_ml_provider.runtime.datasets import load_digits_split, load_npz_or_csv, shard
from airflow_ml_provider.runtime.metrics_log import emit, emit_metrics, worker_env

CHECKPOINT_PATTERN = re.compile(r"ckpt-(\d+)\.npz")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = worker_env()
    parser = argparse.ArgumentParser(prog="python -m airflow_ml_provider.runtime.horovod_keras")
    parser.add_argument("--epochs", type=int, default=3, help="last epoch to train (a resumed run continues)")
    parser.add_argument("--batch-size", type=int, default=32, help="per-worker batch size")
    parser.add_argument("--learning-rate", type=float, default=0.05, help="per worker; times worker count")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps-per-epoch", type=int, help="default: one pass over the smallest shard")
    parser.add_argument("--model-dir", default=env.model_dir, help="where rank 0 saves model.keras")
    parser.add_argument("--checkpoint-dir", default=env.checkpoint_dir, help="per-epoch checkpoints; resume")
    parser.add_argument("--train-data", help=".npz/.csv file or shard directory instead of the bundled digits")
    parser.add_argument("--test-data", help="held-out .npz/.csv for the final result (with --train-data)")
    return parser.parse_args(argv)


def latest_checkpoint(checkpoint_dir: str | None) -> tuple[int, str] | None:
    """Return ``(epoch, path)`` of the newest ``ckpt-<epoch>.npz`` in ``checkpoint_dir``, or None."""
    if not checkpoint_dir:
        return None
    found = [
        (int(m.group(1)), path)
        for path in glob.glob(os.path.join(checkpoint_dir, "ckpt-*.npz"))
        if (m := CHECKPOINT_PATTERN.fullmatch(os.path.basename(path)))
    ]
    return max(found) if found else None


def save_checkpoint(checkpoint_dir: str, epoch: int, model, optimizer) -> str:
    """Atomically write weights, optimizer state, the epoch and the optimizer ``step``; return the path."""
    os.makedirs(checkpoint_dir, exist_ok=True)
    path = os.path.join(checkpoint_dir, f"ckpt-{epoch:06d}.npz")
    arrays = {f"model_{i}": np.asarray(v.numpy()) for i, v in enumerate(model.variables)}
    arrays.update({f"optimizer_{i}": np.asarray(v.numpy()) for i, v in enumerate(optimizer.variables)})
    tmp = os.path.join(checkpoint_dir, f".tmp-{os.getpid()}-ckpt-{epoch:06d}.npz")
    np.savez(tmp, epoch=np.int64(epoch), step=np.int64(optimizer.iterations.numpy()), **arrays)
    os.replace(tmp, path)
    return path


def load_checkpoint(path: str, model, optimizer) -> int:
    """Restore what :func:`save_checkpoint` wrote into built ``model`` and ``optimizer``; return the epoch."""
    with np.load(path) as data:
        for i, v in enumerate(model.variables):
            v.assign(data[f"model_{i}"])
        for i, v in enumerate(optimizer.variables):
            v.assign(data[f"optimizer_{i}"])
        return int(data["epoch"])


def weights_checksum(model) -> str:
    """SHA-256 over the bytes of every trainable weight, in order: equal on every rank after sync."""
    digest = hashlib.sha256()
    for v in model.trainable_variables:
        digest.update(np.ascontiguousarray(v.numpy()).tobytes())
    return digest.hexdigest()


def _load_data(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The bundled digits split, or the given files (features as float32, labels as int32 classes)."""
    if not args.train_data:
        return load_digits_split(args.seed)
    X_train, y_train = load_npz_or_csv(args.train_data)
    X_test, y_test = load_npz_or_csv(args.test_data) if args.test_data else (X_train, y_train)
    return X_train.astype(np.float32), y_train.astype(np.int32), X_test.astype(np.float32), y_test.astype(np.int32)


def build_model(n_features: int, n_classes: int, learning_rate: float):
    """The MLP, its built SGD optimizer (so checkpoints and Horovod see every variable) and its loss."""
    import keras

    model = keras.Sequential(
        [keras.Input((n_features,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(n_classes)]
    )
    optimizer = keras.optimizers.SGD(learning_rate=learning_rate, momentum=0.9)
    optimizer.build(model.trainable_variables)
    return model, optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def make_train_step(model, optimizer, loss_fn):
    """One synchronous data-parallel step (gradients averaged over the ranks); returns (loss, accuracy)."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            logits = model(xb, training=True)
            loss = loss_fn(yb, logits)
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, [v.value for v in model.trainable_variables])
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        correct = tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32), yb)
        return loss, tf.reduce_mean(tf.cast(correct, tf.float32))

    return train_step


def main(argv: list[str] | None = None) -> int:
    """Train, checkpoint every epoch on rank 0, and report metrics, checksums and the test result."""
    args = _parse_args(argv)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import horovod.tensorflow as hvd
    import keras

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    keras.utils.set_random_seed(args.seed)
    X_train, y_train, X_test, y_test = _load_data(args)
    X, y = shard(X_train, y_train, rank, size)
    steps = args.steps_per_epoch or max(1, len(X_train) // size // args.batch_size)

    n_classes = int(max(y_train.max(), y_test.max())) + 1
    model, optimizer, loss_fn = build_model(X.shape[1], n_classes, args.learning_rate * size)

    start_epoch, resumed = 0, None
    if rank == 0 and (found := latest_checkpoint(args.checkpoint_dir)):
        start_epoch, resumed = load_checkpoint(found[1], model, optimizer), found[1]
        optimizer.learning_rate = args.learning_rate * size  # the checkpoint also holds the old rate
    start_epoch, resumed = hvd.broadcast_object((start_epoch, resumed), root_rank=0, name="resume")
    hvd.broadcast_variables([v.value for v in model.variables + optimizer.variables], root_rank=0)
    if resumed:
        emit("resumed", epoch=start_epoch, step=int(optimizer.iterations.numpy()), path=resumed, rank=rank)

    train_step = make_train_step(model, optimizer, loss_fn)
    for epoch in range(start_epoch + 1, args.epochs + 1):
        order = np.random.default_rng((args.seed, rank, epoch)).permutation(len(X))
        order = np.resize(order, steps * args.batch_size)  # every rank runs the same number of steps
        totals = np.zeros(2)
        for batch in np.split(order, steps):
            totals += [float(t) for t in train_step(X[batch], y[batch])]
        mean = hvd.allreduce(tf.constant(totals / steps), op=hvd.Average, name=f"epoch_{epoch}").numpy()
        if rank == 0:
            emit_metrics(step=epoch, loss=mean[0], accuracy=mean[1])
            if args.checkpoint_dir:
                path = save_checkpoint(args.checkpoint_dir, epoch, model, optimizer)
                emit("checkpoint", epoch=epoch, step=int(optimizer.iterations.numpy()), path=path)

    emit("weights_checksum", rank=rank, checksum=weights_checksum(model))
    if rank == 0:
        if args.model_dir:
            os.makedirs(args.model_dir, exist_ok=True)
            path = os.path.join(args.model_dir, "model.keras")
            model.save(path)
            emit("model_saved", path=path)
        logits = model(X_test, training=False)
        accuracy = float(np.mean(np.argmax(logits, axis=1) == y_test))
        emit("result", accuracy=accuracy, loss=float(loss_fn(y_test, logits)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
