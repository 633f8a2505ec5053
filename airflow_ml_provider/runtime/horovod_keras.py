"""Horovod data-parallel Keras 3 trainer (digits MLP) with per-epoch checkpoints and resume.

Checkpoints, data and the model may live on a local path or object storage (runtime.storage); a
restarted job resumes from ``AIRFLOW_ML_RESUME_FROM``, else from its newest checkpoint
(runtime.checkpoints), and never trains a finished epoch again; only the newest ``--keep-checkpoints``
checkpoints stay.

Keras 3 does not work with ``horovod.tensorflow.keras``, so this uses ``horovod.tensorflow`` directly
and hands Horovod the underlying ``tf.Variable`` of each Keras variable (``v.value``).
"""

from __future__ import annotations

import argparse
import hashlib

import numpy as np

from airflow_ml_provider.artifact_layout import join
from airflow_ml_provider.runtime import storage
from airflow_ml_provider.runtime.checkpoints import Checkpoints, add_keep_argument, announce_resume
from airflow_ml_provider.runtime.datasets import load_digits_split, load_npz_or_csv, shard
from airflow_ml_provider.runtime.lean_imports import sklearn_hidden
from airflow_ml_provider.runtime.metrics_log import (
    StepLines,
    emit,
    emit_epoch_metrics,
    emit_progress,
    worker_env,
)
from airflow_ml_provider.runtime.quiet import quiet_startup


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = worker_env()
    parser = argparse.ArgumentParser(prog="python -m airflow_ml_provider.runtime.horovod_keras")
    parser.add_argument("--epochs", type=int, default=3, help="last epoch to train (a resumed run continues)")
    parser.add_argument("--batch-size", type=int, default=32, help="per-worker batch size")
    parser.add_argument("--learning-rate", type=float, default=0.05, help="per worker; times worker count")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps-per-epoch", type=int, help="default: one pass over the smallest shard")
    parser.add_argument("--model-dir", default=env.model_dir, help="where rank 0 saves model.keras (path or URL)")
    parser.add_argument("--checkpoint-dir", default=env.checkpoint_dir, help="per-epoch checkpoints; resume (path or URL)")
    add_keep_argument(parser)
    parser.add_argument("--train-data", help=".npz/.csv file or shard directory instead of the bundled digits")
    parser.add_argument("--test-data", help="held-out .npz/.csv for the final result (with --train-data)")
    return parser.parse_args(argv)


def checkpoints(checkpoint_dir: str | None, keep: int) -> Checkpoints:
    """This trainer's checkpoints: ``ckpt-<epoch>.npz`` (elastic: ``ckpt-<step>.npz``) in ``checkpoint_dir``."""
    return Checkpoints(checkpoint_dir, "ckpt", "npz", keep)


def save_checkpoint(store: Checkpoints, number: int, model, optimizer, **fields) -> str:
    """Atomically write weights, optimizer state, ``number`` (the epoch) and the optimizer ``step`` into
    ``store``; report it with ``fields``; return its location (a path or URL)."""
    arrays = {f"model_{i}": np.asarray(v.numpy()) for i, v in enumerate(model.variables)}
    arrays.update({f"optimizer_{i}": np.asarray(v.numpy()) for i, v in enumerate(optimizer.variables)})
    step = np.int64(optimizer.iterations.numpy())
    return store.save(
        number, lambda tmp: np.savez(tmp, epoch=np.int64(number), step=step, **arrays), **fields
    )


def load_checkpoint(path: str, model, optimizer) -> int:
    """Restore what :func:`save_checkpoint` wrote into built ``model`` and ``optimizer``; return the epoch."""
    with storage.open_read(path) as f, np.load(f) as data:
        for i, v in enumerate(model.variables):
            v.assign(data[f"model_{i}"])
        for i, v in enumerate(optimizer.variables):
            v.assign(data[f"optimizer_{i}"])
        return int(data["epoch"])


def save_model(model_dir: str, model) -> str:
    """Save ``model.keras`` into ``model_dir`` (a path or URL) in one step and report it."""
    path = storage.write_atomic(join(model_dir, "model.keras"), model.save, ".keras")
    emit("model_saved", path=path)
    return path


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
    """One synchronous data-parallel step (gradients averaged over the ranks); returns (loss, accuracy).
    Traced without AutoGraph: the step has no Python control flow on tensors, and AutoGraph would convert
    Keras's layer, loss and optimizer code on every rank's first step (1.7 of a one-epoch rank's 5.7 CPU s;
    the trained weights are bit-identical either way)."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    @tf.function(autograph=False)
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


def start_horovod(seed: int):
    """TensorFlow, one thread per op (the ranks share the machine's cores), and Horovod, initialized and
    seeded: every trainer's start. Returns (tf, hvd)."""
    # quiet_startup: TensorFlow's start-up notices (AIRFLOW_ML_TF_STARTUP_LOGS=1 shows them); sklearn_hidden:
    # Keras's scikit-learn wrappers, unused (runtime.lean_imports)
    with quiet_startup(), sklearn_hidden():
        import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import horovod.tensorflow as hvd
    import keras

    hvd.init()
    keras.utils.set_random_seed(seed)
    return tf, hvd


def report_result(hvd, model, loss_fn, model_dir: str | None, X_test, y_test, **fields) -> None:
    """Every trainer's end: each rank's weights checksum; rank 0 saves the model and reports the test
    accuracy and loss (with ``fields``)."""
    emit("weights_checksum", rank=hvd.rank(), checksum=weights_checksum(model))
    if hvd.rank() == 0:
        if model_dir:
            save_model(model_dir, model)
        logits = model(X_test, training=False)
        emit("result", accuracy=float(np.mean(np.argmax(logits, axis=1) == y_test)),
             loss=float(loss_fn(y_test, logits)), **fields)


def main(argv: list[str] | None = None) -> int:
    """Train, checkpoint every epoch on rank 0, and report metrics, checksums and the test result."""
    args = _parse_args(argv)
    tf, hvd = start_horovod(args.seed)
    rank, size = hvd.rank(), hvd.size()
    X_train, y_train, X_test, y_test = _load_data(args)
    X, y = shard(X_train, y_train, rank, size)
    steps = args.steps_per_epoch or max(1, len(X_train) // size // args.batch_size)

    n_classes = int(max(y_train.max(), y_test.max())) + 1
    model, optimizer, loss_fn = build_model(X.shape[1], n_classes, args.learning_rate * size)

    start_epoch, resumed = 0, None
    store = checkpoints(args.checkpoint_dir, args.keep_checkpoints)
    if rank == 0 and (resumed := store.resume_from()):
        start_epoch = load_checkpoint(resumed[0], model, optimizer)
        optimizer.learning_rate = args.learning_rate * size  # the checkpoint also holds the old rate
    start_epoch, resumed = hvd.broadcast_object((start_epoch, resumed), root_rank=0, name="resume")
    hvd.broadcast_variables([v.value for v in model.variables + optimizer.variables], root_rank=0)
    if resumed:
        announce_resume(*resumed, rank=rank, epoch=start_epoch, step=int(optimizer.iterations.numpy()))

    train_step = make_train_step(model, optimizer, loss_fn)
    progress = StepLines(burst=1)  # inside an epoch: at most a line a second, rank 0's
    for epoch in range(start_epoch + 1, args.epochs + 1):
        order = np.random.default_rng((args.seed, rank, epoch)).permutation(len(X))
        order = np.resize(order, steps * args.batch_size)  # every rank runs the same number of steps
        totals = np.zeros(2)
        for done, batch in enumerate(np.split(order, steps), start=1):
            totals += [float(t) for t in train_step(X[batch], y[batch])]
            if rank == 0 and done < steps and progress.due():
                emit_progress(epoch, done, steps, loss=totals[0] / done, accuracy=totals[1] / done)
        mean = hvd.allreduce(tf.constant(totals / steps), op=hvd.Average, name=f"epoch_{epoch}").numpy()
        if rank == 0:
            emit_epoch_metrics(epoch, loss=mean[0], accuracy=mean[1])
            if store.directory:
                save_checkpoint(store, epoch, model, optimizer,
                                epoch=epoch, step=int(optimizer.iterations.numpy()))

    report_result(hvd, model, loss_fn, args.model_dir, X_test, y_test)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
