"""Hyperparameter search: how trials scale out, and what Bayesian optimization (TPE) buys over random.

(1) Scaling: the same 16 LightGBM trials (random sampler, fixed seed, so every run trains the same
    parameters) through the search loop on the local backend with max_parallel 1, 2, ... Prints wall time,
    speedup over max_parallel 1 and efficiency (speedup / max_parallel; 1.0 is perfect scale-out). Each
    trial is one single-threaded worker, so on N free cores up to N trials should overlap.
(2) Trials to target: TPE vs random sampling of the same 5-parameter LightGBM space on a fixed synthetic
    problem, over several seeds, with the project's sampler settings (``make_sampler``). Trials train
    in-process here: the sampler's choices, not the backend, are being compared. The target is the 95th
    percentile of every trial value either sampler saw, so it is reachable and the same for both.
    Printed, not asserted: TPE is expected to reach the target in fewer trials and to end at least as
    high at equal budget on most seeds, not on every one.

    AIRFLOW_HOME=/tmp/bench-home .venv/bin/python benchmarks/hpo_scaling.py [--parallel 1 2 4] [--seeds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import optuna

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.runtime.datasets import write_synthetic
from airflow_ml_provider.search.runner import TrialScheduler, summarize
from airflow_ml_provider.search.space import make_sampler, parse_settings, parse_space
from airflow_ml_provider.search.study import open_storage, open_study, study_name

TRAIN_ENV = Path(__file__).resolve().parent.parent / ".venv-train"
SPACE = {
    "learning_rate": {"type": "float", "low": 0.005, "high": 0.5, "log": True},
    "num_leaves": {"type": "int", "low": 2, "high": 128, "log": True},
    "min_data_in_leaf": {"type": "int", "low": 1, "high": 200, "log": True},
    "feature_fraction": {"type": "float", "low": 0.2, "high": 1.0},
    "lambda_l2": {"type": "float", "low": 1e-3, "high": 10.0, "log": True},
}


def scaling(parallelism: list[int], trials: int, rows: int, rounds: int) -> list[tuple[int, float]]:
    """Wall time of the same ``trials`` LightGBM trial jobs at each max_parallel."""
    times = []
    with tempfile.TemporaryDirectory(prefix="bench-hpo-") as tmp:
        root, data = Path(tmp), Path(tmp, "ml", "data")  # the backend's data directory: its jobs see it
        write_synthetic(data / "train.npz", data / "valid.npz", rows=rows, features=20, seed=0)
        params = {"objective": "binary", "seed": 0, **{name: f"{{{{ params.{name} }}}}" for name in SPACE}}
        command = ["python", "-m", "airflow_ml_provider.runtime.lightgbm_trainer", "--train-data",
                   str(data / "train.npz"), "--valid-data", str(data / "valid.npz"), "--params-json",
                   json.dumps(params), "--num-boost-round", str(rounds)]
        backend = LocalBackend(root / "ml", image=str(TRAIN_ENV))
        space = parse_space(SPACE)
        for parallel in parallelism:
            settings = parse_settings(sampler="random", n_trials=trials, max_parallel=parallel, seed=0,
                                      pruner="none", poll_interval=0.2)
            identity = JobIdentity("bench", f"hpo-p{parallel}", "run")
            study = open_study(open_storage(f"sqlite:///{root / 'optuna.db'}"),
                               study_name(identity), settings, space)

            def template(name: str) -> TrainingJobSpec:
                return TrainingJobSpec(framework="lightgbm", command=command, num_workers=1,
                                       model_dir=f"{backend.default_artifact_dir(name)}/model")

            start = time.perf_counter()
            TrialScheduler(backend, study, space, settings, template, identity).run()
            elapsed = time.perf_counter() - start
            result = summarize(study)
            if result["n_complete"] != trials:
                sys.exit(f"max_parallel {parallel}: only {result['n_complete']} of {trials} trials completed")
            times.append((parallel, elapsed))
            print(f"max_parallel {parallel:>2}: {trials} trials in {elapsed:6.1f} s "
                  f"(best auc {result['best_value']:.4f})", flush=True)
    return times


def sampler_race(samplers: list[str], seeds: int, budget: int, rows: int, rounds: int) -> dict:
    """Per sampler, per seed: the best-so-far objective after each trial (in-process LightGBM)."""
    import lightgbm as lgb
    from sklearn.datasets import make_classification
    from sklearn.metrics import roc_auc_score

    X, y = make_classification(n_samples=rows, n_features=30, n_informative=8, n_redundant=6, flip_y=0.08,
                               class_sep=0.7, random_state=42)
    cut = int(rows * 0.7)
    X_train, y_train, X_valid, y_valid = X[:cut], y[:cut], X[cut:], y[cut:]
    space = parse_space(SPACE)
    curves: dict[str, list[list[float]]] = {sampler: [] for sampler in samplers}
    values: list[float] = []
    for seed in range(seeds):
        for sampler in samplers:
            settings = parse_settings(sampler=sampler, n_trials=budget, seed=seed)
            study = optuna.create_study(direction="maximize", sampler=make_sampler(settings, space, 0))
            for _ in range(budget):
                trial = study.ask()
                params = {"objective": "binary", "verbosity": -1, "num_threads": 1, "seed": 0,
                          **space.suggest(trial)}
                booster = lgb.train(params, lgb.Dataset(X_train, y_train), num_boost_round=rounds)
                value = float(roc_auc_score(y_valid, booster.predict(X_valid)))
                study.tell(trial, value)
                values.append(value)
            curves[sampler].append(list(np.maximum.accumulate([t.value for t in study.trials])))
            print(f"seed {seed} {sampler:>6}: best auc after {budget} trials {curves[sampler][-1][-1]:.4f}",
                  flush=True)
    return {"curves": curves, "target": float(np.percentile(values, 95))}


def trials_to_target(curve: list[float], target: float) -> int | None:
    return next((index + 1 for index, best in enumerate(curve) if best >= target), None)


def report_race(race: dict, budget: int) -> None:
    target, curves = race["target"], race["curves"]
    print(f"\ntarget auc {target:.4f} (95th percentile of all trials)")
    print(f"{'sampler':<8}{'reached':>9}{'median trials':>15}{'mean best':>11}  trials to target per seed")
    for sampler, runs in curves.items():
        counts = [trials_to_target(curve, target) for curve in runs]
        reached = [count for count in counts if count is not None]
        median = f"{statistics.median(reached):.1f}" if reached else "-"
        cells = " ".join(str(count) if count else f">{budget}" for count in counts)
        print(f"{sampler:<8}{len(reached):>5}/{len(runs):<3}{median:>15}"
              f"{statistics.mean(curve[-1] for curve in runs):>11.4f}  {cells}")
    if {"tpe", "random"} <= curves.keys():
        wins = sum(t[-1] >= r[-1] for t, r in zip(curves["tpe"], curves["random"], strict=True))
        print(f"TPE ended better than or equal to random at {budget} trials on {wins} of "
              f"{len(curves['tpe'])} seeds")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 2], help="max_parallel values (1 2)")
    parser.add_argument("--trials", type=int, default=16, help="trials per scaling run (16)")
    parser.add_argument("--rows", type=int, default=20_000, help="rows of the scaling trials' data (20000)")
    parser.add_argument("--rounds", type=int, default=100, help="boosting rounds per scaling trial (100)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds of the sampler comparison (5)")
    parser.add_argument("--budget", type=int, default=30, help="trials per sampler and seed (30)")
    parser.add_argument("--skip-scaling", action="store_true", help="only compare the samplers")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not args.skip_scaling:
        if not (TRAIN_ENV / "bin" / "python").exists():
            sys.exit(f"no training environment at {TRAIN_ENV}: run `make training-env` first")
        times = scaling(sorted(set(args.parallel) | {1}), args.trials, args.rows, args.rounds)
        base = dict(times)[1]
        print(f"\n{'max_parallel':<14}{'wall s':>8}{'speedup':>9}{'efficiency':>12}")
        for parallel, seconds in times:
            speedup = base / seconds
            print(f"{parallel:<14}{seconds:>8.1f}{speedup:>9.2f}{speedup / parallel:>12.2f}")
        print()
    race = sampler_race(["tpe", "random"], args.seeds, args.budget, rows=4000, rounds=40)
    report_race(race, args.budget)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
