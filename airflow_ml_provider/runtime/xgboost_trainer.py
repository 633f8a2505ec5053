"""XGBoost worker: one worker of XGBoost's distributed ``hist`` training (its collective, joined through the
``DMLC_*`` variables the job gives every worker: ``jobs.xgboost``), or a single process.

Each worker trains on its shard of ``--train-data`` (a file, a directory of shards or an object-store prefix);
XGBoost's allreduce makes every worker grow the same trees, so every worker holds the same booster. Every
worker evaluates the whole ``--valid-data``: the collective combines the workers' metrics, which are those of
one copy of the set when every worker holds all of it, and rank 0 reports them (the ``metrics`` lines the other
trainers write). Every ``--checkpoint-every`` rounds rank 0 saves the booster (``booster-<rounds>.json`` in the
checkpoint directory, a path or object-store URL). A restarted job starts every worker from
``AIRFLOW_ML_RESUME_FROM``, else from the newest booster, and trains only the rounds still missing
(``xgb.train(xgb_model=...)`` continues from the saved trees). Rank 0 saves the model as ``model.ubj`` (XGBoost's binary JSON: a suffix no other trainer's
file has, by which evaluation, the registry and scoring know an XGBoost model).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

import numpy as np

from airflow_ml_provider.artifact_layout import join
from airflow_ml_provider.runtime import storage
from airflow_ml_provider.runtime.boosting_args import boosting_parser
from airflow_ml_provider.runtime.checkpoints import Checkpoints, announce_resume
from airflow_ml_provider.runtime.datasets import load_npz_or_csv, shard
from airflow_ml_provider.runtime.evaluate import classification_metrics
from airflow_ml_provider.runtime.lean_imports import sklearn_hidden
from airflow_ml_provider.runtime.metrics_log import StepLines, WorkerEnv, emit, emit_metrics, worker_env

# XGBoost's aliases of the parameters defaulted here: a user's spelling wins over the default.
_ALIASES = {"nthread": ("nthread", "n_jobs"), "tree_method": ("tree_method",), "objective": ("objective",),
            "eval_metric": ("eval_metric",)}


class UsageError(Exception):
    """Input the user must fix (missing data, malformed parameters); exit code 2."""


def build_params(user_params: dict) -> dict:
    """The user's parameters over the defaults: ``hist``, one thread (set: XGBoost would take every core, and a
    job's workers share the machine's), a binary objective with logloss and AUC."""
    params = dict(user_params)
    defaults = {"nthread": 1, "tree_method": "hist", "objective": "binary:logistic"}
    for name, value in defaults.items():
        if not any(alias in params for alias in _ALIASES[name]):
            params[name] = value
    if "eval_metric" not in params and params["objective"] == "binary:logistic":
        params["eval_metric"] = ["logloss", "auc"]
    return params


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    return boosting_parser("xgboost_trainer", "XGBoost", "model.ubj",
                           ".npz (X, y) or .csv with a label column, or their folder",
                           "evaluated by every worker, reported by rank 0 (not sharded)").parse_args(argv)


def communicator(env: WorkerEnv):
    """XGBoost's collective for this worker, from the ``DMLC_*`` variables (a context); none without them (a
    process run on its own, e.g. a generic job's)."""
    if "DMLC_TRACKER_URI" not in os.environ:
        return contextlib.nullcontext()
    from xgboost import collective

    try:
        return collective.CommunicatorContext(dmlc_tracker_uri=os.environ["DMLC_TRACKER_URI"],
                                              dmlc_tracker_port=int(os.environ["DMLC_TRACKER_PORT"]),
                                              dmlc_task_id=os.environ.get("DMLC_TASK_ID", str(env.rank)))
    except (KeyError, ValueError) as exc:
        raise UsageError(f"DMLC_TRACKER_PORT and DMLC_TASK_ID must be set for {env.num_workers} workers: {exc}") from None


def train(args: argparse.Namespace) -> None:
    """Train on this worker's shard; rank 0 reports metrics, saves the checkpoints, the model and the result."""
    env = worker_env()
    if "DMLC_TASK_ID" in os.environ:
        env = WorkerEnv(int(os.environ["DMLC_TASK_ID"]), env.num_workers, env.machines, env.local_port,
                        env.model_dir, env.checkpoint_dir)
    try:
        user_params = json.loads(args.params_json)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--params-json is not valid JSON: {exc}") from exc
    if not isinstance(user_params, dict):
        raise UsageError(f"--params-json must be a JSON object, got {type(user_params).__name__}")
    if min(args.num_boost_round, args.log_every, args.checkpoint_every) < 1:
        raise UsageError("--num-boost-round, --log-every and --checkpoint-every must be positive")
    params = build_params(user_params)
    try:
        X, y = shard(*load_npz_or_csv(args.train_data), env.rank, env.num_workers)
        valid = load_npz_or_csv(args.valid_data) if args.valid_data else None
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(str(exc)) from exc
    with sklearn_hidden():
        import xgboost as xgb

    checkpoints = Checkpoints(args.checkpoint_dir or env.checkpoint_dir, "booster", "json", args.keep_checkpoints)
    with communicator(env):
        resumed, done = _resume_point(xgb, checkpoints, env.rank)
        booster = resumed
        if done < args.num_boost_round:
            dtrain = xgb.DMatrix(X, y, nthread=next(params[a] for a in _ALIASES["nthread"] if a in params))
            evals = [(xgb.DMatrix(*valid), "valid")] if valid is not None else []
            booster = xgb.train(params, dtrain, num_boost_round=args.num_boost_round - done, evals=evals,
                                xgb_model=resumed, verbose_eval=False,
                                callbacks=[_progress(xgb, args, checkpoints, env.rank, bool(evals), done)])
    if env.rank != 0:
        return
    model_dir = args.model_dir or env.model_dir
    if model_dir:
        path = storage.write_atomic(join(model_dir, "model.ubj"), booster.save_model, ".ubj")
        emit("model_saved", path=path)
    emit("result", num_trees=booster.num_boosted_rounds(),
         **(_held_out(xgb, booster, *valid) if valid is not None else {}))


def _progress(xgb, args: argparse.Namespace, checkpoints: Checkpoints, rank: int, has_valid: bool, done: int):
    """The callback that, after every round, writes rank 0's metrics line (every ``--log-every`` rounds and the
    last) and checkpoint (every ``--checkpoint-every``). Rounds count from the start of training, a resumed
    job's ``done`` rounds included: XGBoost 3.2 numbers a continued model's iterations from 0 again
    (xgboost/training.py, ``for i in range(start_iteration, num_boost_round)``, ``start_iteration = 0``)."""

    lines = StepLines()

    class Progress(xgb.callback.TrainingCallback):
        def after_iteration(self, model, epoch: int, evals_log) -> bool:
            rounds = done + epoch + 1
            if rank != 0:
                return False
            last = rounds == args.num_boost_round
            if has_valid and (rounds % args.log_every == 0 or last) and lines.due(last):
                results = {name: values[-1] for name, values in evals_log.get("valid", {}).items()}
                if results:
                    loss_name = "logloss" if "logloss" in results else next(iter(results))
                    emit_metrics(step=rounds, loss=results.pop(loss_name), **results)
            if checkpoints.directory and rounds % args.checkpoint_every == 0:
                checkpoints.save(rounds, model.save_model, step=rounds, round=rounds)
            return False

    return Progress()


def _resume_point(xgb, checkpoints: Checkpoints, rank: int):
    """``(booster, rounds it holds)`` of the checkpoint to continue from, or ``(None, 0)``."""
    found = checkpoints.resume_from()
    if found is None:
        return None, 0
    with storage.local_copy(found[0]) as local:
        booster = xgb.Booster(model_file=local)
    done = booster.num_boosted_rounds()
    announce_resume(*found, rank=rank, step=done, round=done)
    return booster, done


def _held_out(xgb, booster, X, y) -> dict:
    """The final model on the validation set: the AUC of a binary model's probabilities, or the classification
    metrics of class probabilities."""
    predicted = booster.predict(xgb.DMatrix(X))
    if predicted.ndim == 2:
        return classification_metrics(y, predicted)
    if len(np.unique(y)) == 2:
        from sklearn.metrics import roc_auc_score

        return {"auc": float(roc_auc_score(y, predicted))}
    return {}


def main(argv: list[str] | None = None) -> int:
    """Run the trainer; usage errors print one line on stderr and return 2."""
    args = _parse_args(argv)
    try:
        train(args)
    except UsageError as exc:
        print(f"xgboost_trainer: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
