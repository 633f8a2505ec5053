"""Elastic Horovod trainer (digits MLP): workers may leave (killed, preempted) and join mid-training.

Runs under ``horovodrun --min-np/--max-np --host-discovery-script``. The model, optimizer and step
function are horovod_keras's; what differs is the loop: ``hvd.elastic.run`` with a
``TensorFlowState`` holding every variable plus the global ``step``, committed every
``--commit-every`` steps. When a worker is lost, the survivors roll back to the last commit (model,
optimizer and step counter together) and continue with fewer ranks, so a step trained after the
last commit is trained again but counted once; when one joins, the next commit re-forms the ring and
the newcomer receives the committed state. Each step's global batch is a function of the step
alone, split over however many ranks there are. Rank 0 also writes ``ckpt-<step>.npz`` every
``--checkpoint-every`` steps (on a path or object storage), so a whole-job restart resumes from
``AIRFLOW_ML_RESUME_FROM`` or the newest of them.
"""

from __future__ import annotations

import argparse

import numpy as np

from airflow_ml_provider.runtime.checkpoints import add_keep_argument, announce_resume
from airflow_ml_provider.runtime.datasets import load_digits_split
from airflow_ml_provider.runtime.horovod_keras import (
    build_model,
    checkpoints,
    load_checkpoint,
    make_train_step,
    report_result,
    save_checkpoint,
    start_horovod,
)
from airflow_ml_provider.runtime.metrics_log import emit, emit_metrics, worker_env


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = worker_env()
    parser = argparse.ArgumentParser(prog="python -m airflow_ml_provider.runtime.horovod_elastic")
    parser.add_argument("--total-steps", type=int, default=300, help="global steps to train, whatever the size")
    parser.add_argument("--batch-size", type=int, default=32, help="per-worker batch size")
    parser.add_argument("--learning-rate", type=float, default=0.05, help="fixed: the worker count changes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--commit-every", type=int, default=1, help="steps between in-memory commits")
    parser.add_argument("--log-every", type=int, default=10, help="steps between metrics lines")
    parser.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints on disk")
    parser.add_argument("--model-dir", default=env.model_dir, help="where rank 0 saves model.keras")
    parser.add_argument("--checkpoint-dir", default=env.checkpoint_dir, help="ckpt-<step>.npz files; resume")
    add_keep_argument(parser)
    return parser.parse_args(argv)


def step_batch(n_rows: int, seed: int, step: int, batch_size: int, rank: int, size: int) -> np.ndarray:
    """This rank's row indices for ``step``: its share of a global batch that depends on the step only."""
    rows = np.random.default_rng((seed, step)).permutation(n_rows)[: batch_size * size]
    return rows[rank::size]


def eager_state(hvd, variables: list, **attrs):
    """Elastic state whose ``sync()`` broadcasts the variables from rank 0.

    Horovod 0.28.1's ``TensorFlowState`` broadcasts TF2 (eager) variables only when it is constructed;
    its ``sync()`` re-broadcasts them only under a TF1 session. A worker that joins a running job then
    broadcasts from its constructor while the others sync only the plain attributes, and every rank
    blocks. Here every rank, old or new, broadcasts in ``sync()``, in the same order.
    """
    from horovod.common.elastic import ObjectState

    class EagerVariablesState(ObjectState):
        def __init__(self):
            self.variables = variables
            self._values = [var.numpy() for var in variables]
            super().__init__(bcast_object=hvd.broadcast_object, get_rank=hvd.rank, **attrs)

        def save(self):
            self._values = [var.numpy() for var in self.variables]
            super().save()

        def restore(self):
            for var, value in zip(self.variables, self._values):
                var.assign(value)
            super().restore()

        def sync(self):
            hvd.broadcast_variables(self.variables, root_rank=0)
            self._values = [var.numpy() for var in self.variables]
            super().sync()

    return EagerVariablesState()


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    _, hvd = start_horovod(args.seed)
    X_train, y_train, X_test, y_test = load_digits_split(args.seed)
    model, optimizer, loss_fn = build_model(X_train.shape[1], 10, args.learning_rate)
    train_step = make_train_step(model, optimizer, loss_fn)

    start = 0
    store = checkpoints(args.checkpoint_dir, args.keep_checkpoints)
    if hvd.rank() == 0 and (resumed := store.resume_from()):
        start = load_checkpoint(resumed[0], model, optimizer)
        announce_resume(*resumed, rank=0, step=start)
    state = eager_state(hvd, [v.value for v in model.variables + optimizer.variables], step=start)
    sizes = [hvd.size()]

    def on_reset():
        if hvd.rank() == 0:  # every rank sees the same reset; one line tells the story
            emit("membership", previous_size=sizes[-1], size=hvd.size(), step=state.step)
        sizes.append(hvd.size())

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        while state.step < args.total_steps:
            batch = step_batch(len(X_train), args.seed, state.step, args.batch_size, hvd.rank(), hvd.size())
            loss, accuracy = train_step(X_train[batch], y_train[batch])
            state.step += 1
            last = state.step == args.total_steps
            if state.step % args.commit_every == 0 or last:
                state.commit()
            if hvd.rank() != 0:
                continue
            if state.step % args.log_every == 0 or last:
                emit_metrics(step=state.step, loss=float(loss), accuracy=float(accuracy), workers=hvd.size())
            if store.directory and (state.step % args.checkpoint_every == 0 or last):
                save_checkpoint(store, state.step, model, optimizer, step=state.step)

    train(state)
    report_result(hvd, model, loss_fn, args.model_dir, X_test, y_test, steps=state.step,
                  optimizer_steps=int(optimizer.iterations.numpy()), workers=hvd.size())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
