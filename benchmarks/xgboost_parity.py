"""Quality parity and speed of XGBoost's distributed training: 1 worker vs 2 workers on the local backend.

Both train the same synthetic binary set (200k rows x 20 features, fixed seed, 20% held out for
validation) for 200 rounds through ``LocalBackend`` (framework "xgboost": the job's tracker in its sandbox, the
bundled trainer, ``hist``, one thread per worker), followed as a sync training task follows its job. Each worker
of the 2-worker job sees only its half of the rows (XGBoost's allreduce of the histograms makes the trees the
whole set's), yet their model must be as good: target |AUC(1) - AUC(2)| <= 0.002 on the validation split, AUC
read from the ``result`` line of the job log. Also reported: the speed ratio, median time with 1 worker / with 2
workers. Runs alternate (1, 2, 1, 2, ...) so both see the same machine load. Printed, never asserted.

    AIRFLOW_HOME=/tmp/bench-home .venv/bin/python benchmarks/xgboost_parity.py [--runs 3]
"""

from __future__ import annotations

import sys

from lightgbm_parity import main  # the sibling benchmark: the same data, runs and report, for LightGBM

if __name__ == "__main__":
    sys.exit(main("xgboost", __doc__))
