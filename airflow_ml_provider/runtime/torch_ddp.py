"""PyTorch DDP trainer (digits MLP, or the pipeline's .npz/.csv shards), run under ``torchrun``.

Every rank reads what torchrun set (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR/PORT``);
gradients are averaged by ``DistributedDataParallel`` over ``gloo`` on CPU (``nccl`` when this rank has
a GPU). A ``DistributedSampler`` gives each rank its part of every epoch. Rank 0 writes a checkpoint
each epoch (model, optimizer, epoch, step) under the checkpoint dir, a path or object storage
(runtime.checkpoints); a restarted group (torchrun's elastic restart, or a resubmitted job) resumes from
``AIRFLOW_ML_RESUME_FROM`` or the newest checkpoint and never trains a finished epoch again. At the end
each rank logs its weights' checksum (equal on every rank) and rank 0 saves ``model.pt`` (the state
dict and the MLP's sizes: tensors and numbers only, which ``runtime.predict.load_torch_mlp`` loads
without running anything from the file) and reports the test result, in the same structured lines as the other trainers.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import sys

import numpy as np

from airflow_ml_provider.artifact_layout import join
from airflow_ml_provider.runtime import storage
from airflow_ml_provider.runtime.checkpoints import Checkpoints, add_keep_argument, announce_resume
from airflow_ml_provider.runtime.datasets import load_digits_split, load_npz_or_csv
from airflow_ml_provider.runtime.metrics_log import (
    StepLines,
    close_scalars,
    emit,
    emit_epoch_metrics,
    emit_progress,
    worker_env,
)
from airflow_ml_provider.runtime.predict import torch_mlp

MODEL_FILE = "model.pt"


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = worker_env()
    parser = argparse.ArgumentParser(prog="python -m airflow_ml_provider.runtime.torch_ddp")
    parser.add_argument("--epochs", type=int, default=5, help="last epoch to train (a resumed run continues)")
    parser.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    parser.add_argument("--learning-rate", type=float, default=0.05, help="per rank; times the world size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-dir", default=env.model_dir, help=f"where rank 0 saves {MODEL_FILE} (path or URL)")
    parser.add_argument("--checkpoint-dir", default=env.checkpoint_dir, help="per-epoch checkpoints; resume (path or URL)")
    add_keep_argument(parser)
    parser.add_argument("--train-data", help=".npz/.csv file or shard directory instead of the bundled digits")
    parser.add_argument("--test-data", help="held-out .npz/.csv for the final result (with --train-data)")
    return parser.parse_args(argv)


def save_model(model_dir: str, model, n_features: int, n_classes: int) -> str:
    """Write ``model.pt`` (see the module's docstring) into ``model_dir`` in one step and report it."""
    import torch

    state = {"model": model.state_dict(), "n_features": n_features, "n_classes": n_classes}
    path = storage.write_atomic(join(model_dir, MODEL_FILE), lambda tmp: torch.save(state, tmp), ".pt")
    emit("model_saved", path=path)
    return path


def weights_checksum(model) -> str:
    """SHA-256 over every parameter's bytes, in order: equal on every rank after synchronous steps."""
    digest = hashlib.sha256()
    for parameter in model.parameters():
        digest.update(np.ascontiguousarray(parameter.detach().cpu().numpy()).tobytes())
    return digest.hexdigest()


def save_checkpoint(store: Checkpoints, epoch: int, step: int, model, optimizer) -> str:
    """Atomically write the model's and optimizer's state with ``epoch``/``step``, report it, prune."""
    import torch

    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch, "step": step}
    return store.save(epoch, lambda tmp: torch.save(state, tmp), epoch=epoch, step=step)


def load_checkpoint(location: str, model, optimizer) -> tuple[int, int]:
    """Restore what :func:`save_checkpoint` wrote; returns ``(epoch, step)``. Only tensors and plain
    values are read back (``weights_only``): a checkpoint file is data, never code."""
    import torch

    with storage.open_read(location) as f:
        state = torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["epoch"]), int(state["step"])


def _load_data(args: argparse.Namespace):
    if not args.train_data:
        return load_digits_split(args.seed)
    X_train, y_train = load_npz_or_csv(args.train_data)
    X_test, y_test = load_npz_or_csv(args.test_data) if args.test_data else (X_train, y_train)
    return X_train.astype(np.float32), y_train.astype(np.int64), X_test.astype(np.float32), y_test.astype(np.int64)


def _start(seed: int):
    """The process group (gloo on CPU, nccl with a GPU), one thread per rank (ranks share the cores)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if not torch.cuda.is_available():
        dist.init_process_group("gloo")
        torch.manual_seed(seed)
        return torch, dist, torch.device("cpu")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))  # one GPU per rank of the node
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)  # every collective of the rank runs on its GPU
    torch.manual_seed(seed)
    return torch, dist, device


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    torch, dist, device = _start(args.seed)
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    rank, size = dist.get_rank(), dist.get_world_size()
    X_train, y_train, X_test, y_test = _load_data(args)
    n_classes = int(max(y_train.max(), y_test.max())) + 1
    data = TensorDataset(torch.from_numpy(X_train), torch.from_numpy(y_train.astype(np.int64)))
    sampler = DistributedSampler(data, num_replicas=size, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)

    model = torch_mlp(X_train.shape[1], n_classes).to(device)  # every rank builds it alike (seeded)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate * size, momentum=0.9)
    store = Checkpoints(args.checkpoint_dir, "ckpt", "pt", args.keep_checkpoints)
    found = [store.resume_from() if rank == 0 else None]
    dist.broadcast_object_list(found, src=0)  # every rank resumes from the one checkpoint rank 0 chose
    start_epoch, step = 0, 0
    if found[0]:
        start_epoch, step = load_checkpoint(found[0][0], model, optimizer)
        for group in optimizer.param_groups:  # this group's size sets the rate, not the checkpoint's
            group["lr"] = args.learning_rate * size
        announce_resume(*found[0], rank=rank, epoch=start_epoch, step=step,
                        restart=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))
    ddp = DistributedDataParallel(model)  # broadcasts rank 0's parameters: every rank starts equal
    loss_fn = torch.nn.CrossEntropyLoss()

    progress = StepLines(burst=1)  # inside an epoch: at most a line a second, rank 0's
    for epoch in range(start_epoch + 1, args.epochs + 1):
        sampler.set_epoch(epoch)
        # loss sum, correct, rows: on the rank's device, where nccl (a GPU's backend) reduces it
        totals = torch.zeros(3, dtype=torch.float64, device=device)
        for done, (xb, yb) in enumerate(loader, start=1):
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad()
            logits = ddp(xb)
            loss = loss_fn(logits, yb)
            loss.backward()
            optimizer.step()
            step += 1
            totals += torch.tensor([loss.item() * len(yb), float((logits.argmax(1) == yb).sum()), len(yb)],
                                   dtype=torch.float64, device=device)
            if rank == 0 and done < len(loader) and progress.due():  # this rank's running figures
                emit_progress(epoch, done, len(loader), loss=float(totals[0] / totals[2]),
                              accuracy=float(totals[1] / totals[2]))
        dist.all_reduce(totals)
        if rank == 0:
            emit_epoch_metrics(epoch, loss=totals[0] / totals[2], accuracy=totals[1] / totals[2])
            if store.directory:
                save_checkpoint(store, epoch, step, model, optimizer)
        dist.barrier()  # no rank starts the next epoch (or ends) before the checkpoint exists

    emit("weights_checksum", rank=rank, checksum=weights_checksum(model))
    if rank == 0:
        if args.model_dir:
            save_model(args.model_dir, model, X_train.shape[1], n_classes)
        with torch.no_grad():
            logits = model(torch.from_numpy(X_test).to(device))
            labels = torch.from_numpy(y_test.astype(np.int64)).to(device)
            emit("result", accuracy=float((logits.argmax(1) == labels).float().mean()),
                 loss=float(loss_fn(logits, labels)), world_size=size)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Ended without the interpreter's finalization: Gloo's worker thread can still be destroying the last
    # collectives' work objects, whose tensors need the GIL, while the interpreter tears down; the thread is
    # then ended and the process aborts (SIGABRT, "terminate called without an active exception"; about 1
    # in 10 two-rank runs on PyTorch 2.13, seen failing a finished job). Everything is written by now.
    close_scalars()  # rank 0's TensorBoard events (os._exit runs no atexit hook)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
