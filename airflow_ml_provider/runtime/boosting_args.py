"""The command line the gradient-boosting trainers (LightGBM, XGBoost) share: one place, so a flag means the same
on both and a pipeline can swap one trainer for the other without rewriting its argv."""

from __future__ import annotations

import argparse

from airflow_ml_provider.runtime.checkpoints import add_keep_argument


def boosting_parser(module: str, library: str, model_file: str, train_help: str,
                    valid_help: str) -> argparse.ArgumentParser:
    """``python -m airflow_ml_provider.runtime.<module>``'s parser: data, ``library``'s parameters as JSON, rounds,
    where rank 0 writes ``model_file``, and the checkpoints to resume from."""
    parser = argparse.ArgumentParser(prog=f"python -m airflow_ml_provider.runtime.{module}")
    parser.add_argument("--train-data", required=True, help=train_help)
    parser.add_argument("--valid-data", help=valid_help)
    parser.add_argument("--params-json", default="{}", help=f"{library} parameters as a JSON object")
    parser.add_argument("--num-boost-round", type=int, default=100)
    parser.add_argument("--log-every", type=int, default=1)
    parser.add_argument("--model-dir", help=f"where rank 0 writes {model_file} (default AIRFLOW_ML_MODEL_DIR)")
    parser.add_argument("--checkpoint-dir", help="booster checkpoints; resume (default AIRFLOW_ML_CHECKPOINT_DIR)")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="rounds between checkpoints")
    add_keep_argument(parser)
    return parser
