"""LightGBM worker: one process of LightGBM's own socket-based data-parallel training, or a single process.

Rank 0 saves the booster every ``--checkpoint-every`` rounds (``booster-<rounds>.txt`` in the checkpoint
directory, a path or object-store URL); a restarted job starts every worker from
``AIRFLOW_ML_RESUME_FROM``, else from the newest of them (LightGBM's ``init_model``), and trains only
the rounds still missing.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

import numpy as np

from airflow_ml_provider.artifacts import join
from airflow_ml_provider.runtime import storage
from airflow_ml_provider.runtime.checkpoints import Checkpoints, announce_resume
from airflow_ml_provider.runtime.datasets import load_npz_or_csv, shard
from airflow_ml_provider.runtime.metrics_log import WorkerEnv, emit, emit_metrics, worker_env

# LightGBM accepts several spellings of a parameter; a user's alias must win over our default.
_ALIASES = {
    "num_threads": ("num_threads", "num_thread", "nthread", "nthreads", "n_jobs"),
    "objective": ("objective", "objective_type", "app", "application", "loss"),
    "verbosity": ("verbosity", "verbose"),
    "metric": ("metric", "metrics", "metric_types"),
}
NETWORK_TIMEOUT_MINUTES = 10
NAME_WAIT_S = 120.0  # how long a peer's name may take to appear in cluster DNS


class UsageError(Exception):
    """Input the user must fix (missing data, malformed parameters); exit code 2."""


def _has(params: dict, name: str) -> bool:
    return any(alias in params for alias in _ALIASES[name])


def build_params(user_params: dict, env: WorkerEnv) -> dict:
    """Merge the user's parameters with single-threaded defaults and, for several workers, the network."""
    params = dict(user_params)
    if not _has(params, "num_threads"):
        params["num_threads"] = 1
    if not _has(params, "verbosity"):
        params["verbosity"] = -1
    if not _has(params, "objective"):
        params["objective"] = "binary"
    if not _has(params, "metric") and params.get("objective") == "binary":
        params["metric"] = ["binary_logloss", "auc"]
    if env.num_workers > 1:
        if len(env.machines) != env.num_workers:
            raise UsageError(
                f"AIRFLOW_ML_MACHINES lists {len(env.machines)} machines for {env.num_workers} workers"
            )
        port = env.local_port or int(env.machines[env.rank].rsplit(":", 1)[1])
        params.setdefault("tree_learner", "data")
        params.setdefault("time_out", NETWORK_TIMEOUT_MINUTES)
        params.update(
            num_machines=env.num_workers,
            machines=",".join(resolve_machines(env.machines)),
            local_listen_port=port,
            pre_partition=True,
        )
    return params


def resolve_machines(machines: list[str], wait_s: float = NAME_WAIT_S) -> list[str]:
    """``ip:port`` for each ``host:port``: LightGBM finds its own rank by comparing the list's entries
    with this machine's addresses as text, so a pod's DNS name (``<job>-0.<job>:12400``, what the
    Kubernetes backends pass) must be resolved first. A peer's name can appear in DNS a little after
    this pod starts, so each is retried for up to ``wait_s`` seconds."""
    resolved = []
    for machine in machines:
        host, _, port = machine.rpartition(":")
        deadline = time.monotonic() + wait_s
        while True:
            try:
                resolved.append(f"{socket.gethostbyname(host)}:{port}")
                break
            except OSError as exc:
                if time.monotonic() >= deadline:
                    raise UsageError(f"AIRFLOW_ML_MACHINES: cannot resolve {host!r}: {exc}") from exc
                time.sleep(1.0)
    return resolved


def _metrics_callback(log_every: int):
    """Return a callback that emits the valid set's metrics every ``log_every`` rounds and at the last."""

    def callback(cb_env) -> None:
        step = cb_env.iteration + 1
        if step % log_every and step != cb_env.end_iteration:
            return
        results = {name: value for data, name, value, *_ in cb_env.evaluation_result_list if data == "valid"}
        if not results:
            return
        loss_name = "binary_logloss" if "binary_logloss" in results else next(iter(results))
        loss = results.pop(loss_name)
        emit_metrics(step=step, loss=loss, **results)

    return callback


def _checkpoint_callback(checkpoints: Checkpoints, every: int):
    """Return a callback that saves the booster every ``every`` rounds (rank 0 only)."""

    def callback(cb_env) -> None:
        rounds = cb_env.iteration + 1
        if rounds % every == 0:
            checkpoints.save(rounds, cb_env.model.save_model, step=rounds, round=rounds)

    return callback


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m airflow_ml_provider.runtime.lightgbm_trainer")
    parser.add_argument("--train-data", required=True, help=".npz (X, y) or .csv with a label column")
    parser.add_argument("--valid-data", help="evaluated every round on every worker (not sharded)")
    parser.add_argument("--params-json", default="{}", help="LightGBM parameters as a JSON object")
    parser.add_argument("--num-boost-round", type=int, default=100)
    parser.add_argument("--log-every", type=int, default=1)
    parser.add_argument("--model-dir", help="where rank 0 writes model.txt (default AIRFLOW_ML_MODEL_DIR)")
    parser.add_argument("--checkpoint-dir", help="booster checkpoints; resume (default AIRFLOW_ML_CHECKPOINT_DIR)")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="rounds between checkpoints")
    return parser.parse_args(argv)


def train(args: argparse.Namespace) -> None:
    """Train on this worker's shard; rank 0 reports metrics, saves the model and the result."""
    env = worker_env()
    try:
        user_params = json.loads(args.params_json)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--params-json is not valid JSON: {exc}") from exc
    if not isinstance(user_params, dict):
        raise UsageError(f"--params-json must be a JSON object, got {type(user_params).__name__}")
    if min(args.num_boost_round, args.log_every, args.checkpoint_every) < 1:
        raise UsageError("--num-boost-round, --log-every and --checkpoint-every must be positive")
    params = build_params(user_params, env)
    try:
        X, y = shard(*load_npz_or_csv(args.train_data), env.rank, env.num_workers)
        valid = load_npz_or_csv(args.valid_data) if args.valid_data else None
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(str(exc)) from exc
    import lightgbm as lgb

    checkpoints = Checkpoints(args.checkpoint_dir or env.checkpoint_dir, "booster", "txt")
    train_set = lgb.Dataset(X, y)
    valid_sets, callbacks = [], []
    if valid is not None:
        valid_sets = [lgb.Dataset(*valid, reference=train_set)]
        if env.rank == 0:
            callbacks = [_metrics_callback(args.log_every)]
    if env.rank == 0 and checkpoints.directory:
        callbacks.append(_checkpoint_callback(checkpoints, args.checkpoint_every))
    booster, done = _resume_point(checkpoints, env.rank)
    if done < args.num_boost_round:
        booster = lgb.train(
            params,
            train_set,
            num_boost_round=args.num_boost_round - done,
            valid_sets=valid_sets,
            valid_names=["valid"][: len(valid_sets)],
            callbacks=callbacks,
            init_model=booster,
        )
    if env.rank != 0:
        return
    model_dir = args.model_dir or env.model_dir
    if model_dir:
        path = storage.write_atomic(join(model_dir, "model.txt"), booster.save_model, ".txt")
        emit("model_saved", path=path)
    result = {"num_trees": booster.num_trees()}
    if valid is not None and len(np.unique(valid[1])) == 2:
        from sklearn.metrics import roc_auc_score

        result["auc"] = float(roc_auc_score(valid[1], booster.predict(valid[0])))
    emit("result", **result)


def _resume_point(checkpoints: Checkpoints, rank: int):
    """``(booster or None, rounds already trained)``: the checkpoint to continue from, if any."""
    found = checkpoints.resume_from()
    if found is None:
        return None, 0
    import lightgbm as lgb

    with storage.local_copy(found[0]) as local:
        booster = lgb.Booster(model_file=local)
    done = booster.current_iteration()
    announce_resume(*found, rank=rank, step=done, round=done)
    return booster, done


def main(argv: list[str] | None = None) -> int:
    """Run the trainer; usage errors print one line on stderr and return 2."""
    args = _parse_args(argv)
    try:
        train(args)
    except UsageError as exc:
        print(f"lightgbm_trainer: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
