"""LightGBM worker: one process of LightGBM's own socket-based data-parallel training, or a single process.

Every ``--checkpoint-every`` rounds rank 0 saves the booster (``booster-<rounds>.txt`` in the checkpoint
directory, a path or object-store URL) and every worker its scores beside it
(``scores-<rank>of<workers>-<rounds>.npz``). A restarted job starts every worker from
``AIRFLOW_ML_RESUME_FROM``, else from the newest booster, and trains only the rounds still missing.
Continuing the way ``lgb.train(init_model=...)`` does first re-scores every row with every tree so far,
more than half the CPU time training them took (5.2 s per worker after 1,125 rounds on 40,000 rows and
20,000 validation rows), so a resumed job fell further behind the later it was preempted. A worker
therefore takes its rows' scores from its scores file, and re-scores only without one. LightGBM hands
out a binary booster's scores only as probabilities, whose logits are its raw scores within 1e-12 (the
model then predicts within 1e-15 of an uninterrupted one's); other objectives keep re-scoring. Only
rank 0, which reports the metrics, keeps the validation set. Of both kinds of file only the newest
``--keep-checkpoints`` stay: rank 0 deletes older boosters, every worker its own older scores files.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

import numpy as np

from airflow_ml_provider.artifact_layout import join
from airflow_ml_provider.runtime import storage
from airflow_ml_provider.runtime.boosting_args import boosting_parser
from airflow_ml_provider.runtime.checkpoints import KEEP, Checkpoints, announce_resume
from airflow_ml_provider.runtime.datasets import load_npz_or_csv, save_npz, shard
from airflow_ml_provider.runtime.evaluate import classification_metrics
from airflow_ml_provider.runtime.lean_imports import sklearn_hidden
from airflow_ml_provider.runtime.metrics_log import StepLines, WorkerEnv, emit, emit_metrics, worker_env

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


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    return boosting_parser("lightgbm_trainer", "LightGBM", "model.txt", ".npz (X, y) or .csv with a label column",
                           "evaluated by rank 0 (not sharded)").parse_args(argv)


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
        valid = load_npz_or_csv(args.valid_data) if args.valid_data and env.rank == 0 else None
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(str(exc)) from exc

    checkpoints = Checkpoints(args.checkpoint_dir or env.checkpoint_dir, "booster", "txt", args.keep_checkpoints)
    resumed = _resume_point(checkpoints, env.rank)
    booster, _, done = resumed or (None, None, 0)
    if done < args.num_boost_round:
        booster = _boost(params, (X, y), valid, resumed, args, checkpoints, env)
    if env.rank != 0:
        return
    model_dir = args.model_dir or env.model_dir
    if model_dir:
        path = storage.write_atomic(join(model_dir, "model.txt"), booster.save_model, ".txt")
        emit("model_saved", path=path)
    emit("result", num_trees=booster.num_trees(), **(_held_out(booster, *valid) if valid is not None else {}))


def _held_out(booster, X, y) -> dict:
    """The final model on the validation set: the AUC of a one-column prediction on two-class labels
    (binary), or the classification metrics of class probabilities (multiclass, whatever num_class)."""
    predicted = booster.predict(X)
    if predicted.ndim == 2:
        return classification_metrics(y, predicted)
    if len(np.unique(y)) == 2:
        from sklearn.metrics import roc_auc_score

        return {"auc": float(roc_auc_score(y, predicted))}
    return {}


def _boost(params: dict, data, valid, resumed, args: argparse.Namespace, checkpoints: Checkpoints, env: WorkerEnv):
    """Train the rounds after the ``resumed`` checkpoint's (or all), reporting metrics (rank 0) and
    saving checkpoints and scores on the way; returns the booster."""
    with sklearn_hidden():
        import lightgbm as lgb

    (X, y), (checkpoint, location, done) = data, resumed or (None, None, 0)
    scores = _initial_scores(checkpoint, location, done, X, valid, env) if checkpoint else {}
    saved_scores = scores_files(checkpoints.directory, env.rank, env.num_workers, checkpoints.keep)
    train_set = lgb.Dataset(X, y, init_score=scores.get("train"), params=params)
    booster = lgb.Booster(params, train_set)  # joins the other workers (LightGBM's network), bins the data
    if checkpoint:
        _prepend_trees(booster, checkpoint)
    if valid is not None:
        booster.add_valid(lgb.Dataset(*valid, init_score=scores.get("valid"), reference=train_set, params=params),
                          "valid")
    lines = StepLines()
    for rounds in range(done + 1, args.num_boost_round + 1):
        booster.update()
        last = rounds == args.num_boost_round
        if valid is not None and (rounds % args.log_every == 0 or last) and lines.due(last):
            _emit_metrics(rounds, booster.eval_valid())
        if checkpoints.directory and rounds % args.checkpoint_every == 0:
            _save_scores(booster, params, saved_scores.path(rounds))
            if env.rank == 0:
                checkpoints.save(rounds, booster.save_model, step=rounds, round=rounds)
            saved_scores.prune(rounds)
    return booster


def _emit_metrics(step: int, evaluation: list) -> None:
    """One metrics line from ``eval_valid()``'s results: ``binary_logloss`` (else the first) as ``loss``."""
    results = {name: value for _, name, value, *_ in evaluation}
    if not results:
        return
    loss_name = "binary_logloss" if "binary_logloss" in results else next(iter(results))
    loss = results.pop(loss_name)
    emit_metrics(step=step, loss=loss, **results)


def _resume_point(checkpoints: Checkpoints, rank: int):
    """``(booster, its location, rounds already trained)`` of the checkpoint to continue from, or None."""
    found = checkpoints.resume_from()
    if found is None:
        return None
    with sklearn_hidden():
        import lightgbm as lgb

    with storage.local_copy(found[0]) as local:
        booster = lgb.Booster(model_file=local)
    done = booster.current_iteration()
    announce_resume(*found, rank=rank, step=done, round=done)
    return booster, found[0], done


def scores_files(directory: str | None, rank: int, workers: int, keep: int = KEEP) -> Checkpoints:
    """A worker's scores files beside the boosters: ``scores-<rank>of<workers>-<rounds>.npz``."""
    return Checkpoints(directory, f"scores-{rank}of{workers}", "npz", keep)


def _save_scores(booster, params: dict, location: str) -> None:
    """Save this worker's raw scores of its rows (and of the validation set, where it has one), if
    they can be had without walking the trees: for a binary objective, as the logits of LightGBM's
    probabilities."""
    if next(params[alias] for alias in _ALIASES["objective"] if alias in params) != "binary":
        return
    sets = ["train"] + (["valid"] if booster.valid_sets else [])
    probabilities = [booster._Booster__inner_predict(data_idx=i) for i in range(len(sets))]  # LightGBM 4.7 (pinned)
    with np.errstate(divide="ignore"):
        raw = {name: (np.log(p) - np.log1p(-p)) / params.get("sigmoid", 1.0) for name, p in zip(sets, probabilities)}
    if all(np.isfinite(scores).all() for scores in raw.values()):  # a saturated probability has no logit
        save_npz(location, **raw)


def _initial_scores(checkpoint, checkpoint_location: str, done: int, X, valid, env: WorkerEnv) -> dict:
    """The raw scores ``checkpoint`` gives this worker's rows and the validation set: from the scores
    file this worker saved beside it when there is one for as many rows, else by re-scoring."""
    location = scores_files(checkpoint_location.rsplit("/", 1)[0], env.rank, env.num_workers).path(done)
    if storage.exists(location):
        with storage.open_read(location) as f, np.load(f) as saved:
            scores = {name: saved[name] for name in saved.files}
        if len(scores["train"]) == len(X) and (valid is None or len(scores.get("valid", ())) == len(valid[0])):
            emit("scores_restored", rank=env.rank, path=location)
            return scores
    return {"train": checkpoint.predict(X, raw_score=True),
            **({"valid": checkpoint.predict(valid[0], raw_score=True)} if valid is not None else {})}


def _prepend_trees(booster, checkpoint) -> None:
    """Put ``checkpoint``'s trees before ``booster``'s (which has none yet): what ``init_model`` does
    after re-scoring. LightGBM has no public call for it; this is its C API's, as ``lgb.train`` uses it."""
    from lightgbm.basic import _LIB, _safe_call

    _safe_call(_LIB.LGBM_BoosterMerge(booster._handle, checkpoint._handle))


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
