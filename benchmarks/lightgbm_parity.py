"""Quality parity and speed of LightGBM data-parallel training: 1 worker vs 2 workers on the local backend.

Both train the same synthetic binary set (200k rows x 20 features, fixed seed, 20% held out for
validation) for 200 rounds through ``LocalBackend`` (framework "lightgbm"), followed as a sync training task
follows its job (woken by the job's status stream, so the times are not rounded up to poll intervals). Each worker of
the 2-worker job sees only its half of the rows, yet their model must be as good: target
|AUC(1) - AUC(2)| <= 0.002 on the validation split, AUC read from the ``result`` line of the job log.
Also reported: the speed ratio, median time with 1 worker / with 2 workers. Runs alternate
(1, 2, 1, 2, ...) so both see the same machine load.

    AIRFLOW_HOME=/tmp/bench-home .venv/bin/python benchmarks/lightgbm_parity.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from local_overhead import TRAIN_ENV, run_job  # the sibling benchmark: the sync driver a task runs

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.logs.metrics import MetricsTracker
from airflow_ml_provider.runtime.datasets import write_synthetic

PARAMS = {"seed": 0}  # the trainer's defaults otherwise: binary objective, one thread per worker (xgboost: hist)
AUC_TARGET = 0.002


def main(framework: str = "lightgbm", doc: str = __doc__) -> int:
    """The comparison for ``framework`` (``lightgbm`` or ``xgboost``: its bundled trainer, whose ``result`` line
    has the AUC); ``doc`` the calling benchmark's description."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per worker count, alternated (default 3)")
    parser.add_argument("--rows", type=int, default=200_000, help="rows, train + valid (default 200k)")
    parser.add_argument("--num-boost-round", type=int, default=200, help="boosting rounds (default 200)")
    args = parser.parse_args()
    print(f"{args.rows} rows x 20 features, {args.num_boost_round} rounds, {args.runs} runs per worker "
          f"count; image {TRAIN_ENV}")
    results: dict[int, dict[str, list[float]]] = {n: {"auc": [], "seconds": []} for n in (1, 2)}
    with tempfile.TemporaryDirectory(prefix=f"bench-{framework}-") as tmp:
        train, valid = Path(tmp, "data", "train.npz"), Path(tmp, "data", "valid.npz")  # <root>/data: jobs see it
        write_synthetic(train, valid, rows=args.rows, features=20, seed=0)
        backend = LocalBackend(root=tmp, image=str(TRAIN_ENV))
        command = ["python", "-m", f"airflow_ml_provider.runtime.{framework}_trainer", "--train-data", str(train),
                   "--valid-data", str(valid), "--params-json", json.dumps(PARAMS),
                   "--num-boost-round", str(args.num_boost_round)]
        for run in range(1, args.runs + 1):
            for workers in (1, 2):
                name = f"{framework}-parity-{workers}w-{run}"
                spec = TrainingJobSpec(framework=framework, num_workers=workers, command=command,
                                       model_dir=backend.default_artifact_dir(name))
                seconds, lines, _ = run_job(backend, name, spec, "sync")
                collector = MetricsTracker()
                for line in lines:
                    collector.feed(line)
                if "auc" not in collector.result:
                    sys.exit(f"job {name}: no AUC in its result line ({collector.result})")
                results[workers]["auc"].append(collector.result["auc"])
                results[workers]["seconds"].append(seconds)
                print(f"run {run}  {workers} worker(s)  AUC {collector.result['auc']:.5f}  {seconds:6.1f} s",
                      flush=True)
    median = {n: {key: statistics.median(values) for key, values in r.items()} for n, r in results.items()}
    diff = median[1]["auc"] - median[2]["auc"]
    speedup = median[1]["seconds"] / median[2]["seconds"]
    print(f"\n{'workers':<10}{'median AUC':>12}{'median s':>10}  AUCs / times (s)")
    for n, r in results.items():
        print(f"{n:<10}{median[n]['auc']:>12.5f}{median[n]['seconds']:>10.2f}  "
              + " ".join(f"{a:.5f}" for a in r["auc"]) + " / " + " ".join(f"{s:.1f}" for s in r["seconds"]))
    print(f"AUC diff (1 - 2): {diff:+.5f}  target |diff| <= {AUC_TARGET}: "
          f"{'met' if abs(diff) <= AUC_TARGET else 'NOT met'}")
    print(f"speed ratio 1-worker/2-worker: {speedup:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
