"""What the search integration tests share (and the restart test's child process runs): tiny LightGBM
trials on a local backend, and a search over them driven by the real Optuna loop."""

from __future__ import annotations

import json
from pathlib import Path

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.runtime.datasets import write_synthetic
from airflow_ml_provider.search.runner import TrialScheduler
from airflow_ml_provider.search.space import parse_settings, parse_space
from airflow_ml_provider.search.study import open_storage, open_study, study_name
from support import TRAINING_IMAGE

LIGHTGBM_SPACE = {
    "learning_rate": {"type": "float", "low": 0.02, "high": 0.3, "log": True},
    "num_leaves": {"type": "int", "low": 4, "high": 31},
}


def backend(root: Path) -> LocalBackend:
    return LocalBackend(root / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=5)


def data_dir(root: Path) -> Path:
    return root / "ml" / "data"


def lightgbm_template(root: Path, rounds: int = 15):
    """Job name -> a one-worker LightGBM trial spec with the search parameters' placeholders; its data
    in the backend's data directory (a job's /tmp is its own: the test's tmp_path is not there)."""
    train, valid = data_dir(root) / "train.npz", data_dir(root) / "valid.npz"
    if not train.exists():
        write_synthetic(train, valid, rows=3000, features=12, seed=5)
    params = {"objective": "binary", "learning_rate": "{{ params.learning_rate }}",
              "num_leaves": "{{ params.num_leaves }}", "seed": 0}
    command = ["python", "-m", "airflow_ml_provider.runtime.lightgbm_trainer", "--train-data", str(train),
               "--valid-data", str(valid), "--params-json", json.dumps(params), "--num-boost-round", str(rounds)]
    jobs = backend(root)
    return lambda name: TrainingJobSpec(framework="lightgbm", command=command, num_workers=1,
                                        model_dir=f"{jobs.default_artifact_dir(name)}/model")


def scheduler(root: Path, template, space: dict, run_id: str = "run", **settings) -> TrialScheduler:
    """A search whose study lives in ``root/optuna.db``: building it again resumes the same study."""
    space, settings = parse_space(space), parse_settings(poll_interval=0.2, **settings)
    identity = JobIdentity("search_tests", "search", run_id)
    storage = open_storage(f"sqlite:///{root / 'optuna.db'}")
    study = open_study(storage, study_name(identity), settings, space)
    return TrialScheduler(backend(root), study, space, settings, template, identity)


if __name__ == "__main__":  # the restart test's first session, killed mid-search
    import sys

    root = Path(sys.argv[1])
    scheduler(root, lightgbm_template(root), LIGHTGBM_SPACE, **json.loads(sys.argv[2])).run()
