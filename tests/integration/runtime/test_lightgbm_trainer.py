"""LightGBM trainer as real processes: native 2-worker data-parallel training matches one process,
resumes from its checkpoints and keeps only the newest of them."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from airflow_ml_provider.jobs.backends.local.ports import free_ports
from airflow_ml_provider.runtime.lightgbm_trainer import UsageError, build_params
from airflow_ml_provider.runtime.metrics_log import WorkerEnv

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
ROUNDS = 40
PARAMS = json.dumps({"learning_rate": 0.1, "num_leaves": 15})


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_ML_")}
    env.update(PYTHONPATH=str(REPO), OMP_WAIT_POLICY="PASSIVE", **extra)
    return env


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _trainer_argv(data, model_dir, *extra):
    return [
        sys.executable, "-m", "airflow_ml_provider.runtime.lightgbm_trainer",
        "--train-data", str(data / "train.npz"), "--valid-data", str(data / "valid.npz"),
        "--params-json", PARAMS, "--num-boost-round", str(ROUNDS), "--model-dir", str(model_dir), *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("lgb-data")
    subprocess.run(
        [sys.executable, "-m", "airflow_ml_provider.runtime.datasets", "synthetic", "--rows", "20000",
         "--features", "20", "--seed", "0", "--out", str(out / "train.npz"),
         "--valid-out", str(out / "valid.npz")],
        env=_env(), check=True, timeout=120,
    )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def single(data, tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("lgb-single")
    proc = subprocess.run(
        _trainer_argv(data, model_dir), env=_env(), capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return model_dir, _events(proc.stdout)


def test_single_process_reports_every_round_and_saves_model(single):
    model_dir, events = single
    metrics = [e for e in events if e["event"] == "metrics"]
    assert [m["step"] for m in metrics] == list(range(1, ROUNDS + 1))
    assert all(set(m) == {"event", "step", "loss", "auc"} for m in metrics)
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    result = events[-1]
    assert result["event"] == "result" and result["num_trees"] == ROUNDS and result["auc"] > 0.95
    assert result["auc"] == pytest.approx(metrics[-1]["auc"], abs=1e-6)
    assert {"event": "model_saved", "path": str(model_dir / "model.txt")} in events
    assert (model_dir / "model.txt").read_text().startswith("tree")


def _run_two_workers(data, base: Path, *extra) -> list[tuple[str, str]]:
    """Run a 2-worker job (rank r writes to ``base/model-r``); each rank's (stdout, stderr)."""
    ports = free_ports(2)  # the local launcher's choice of ports
    machines = ",".join(f"127.0.0.1:{p}" for p in ports)
    procs = [
        subprocess.Popen(
            _trainer_argv(data, base / f"model-{rank}", *extra),
            env=_env(
                AIRFLOW_ML_RANK=str(rank),
                AIRFLOW_ML_NUM_WORKERS="2",
                AIRFLOW_ML_MACHINES=machines,
                AIRFLOW_ML_LOCAL_PORT=str(ports[rank]),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outputs]
    return outputs


@pytest.fixture(scope="module")
def two_workers(data, tmp_path_factory):
    base = tmp_path_factory.mktemp("lgb-two")
    return base, _run_two_workers(data, base, "--log-every", "10")


def _trees(model: Path) -> str:
    """A model file's trees (what follows them lists the parameters, this run's ports among them)."""
    return model.read_text().split("end of trees")[0]


def test_two_workers_match_single_process_auc(single, two_workers):
    base, outputs = two_workers
    assert "total number of machines: 2" in outputs[1][0] + outputs[1][1]
    rank0, rank1 = (_events(out) for out, _ in outputs)
    assert [e["step"] for e in rank0 if e["event"] == "metrics"] == [10, 20, 30, 40]
    assert rank1 == [], "only rank 0 reports"
    assert (base / "model-0" / "model.txt").exists() and not (base / "model-1").exists()
    result = rank0[-1]
    assert result["event"] == "result" and result["num_trees"] == ROUNDS
    assert abs(result["auc"] - single[1][-1]["auc"]) < 0.002


@pytest.fixture
def interrupted(data, tmp_path):
    """Checkpoints of the first half of the two-worker job (boosters by rank 0, scores by both)."""
    _run_two_workers(data, tmp_path / "first", "--checkpoint-dir", str(tmp_path / "ckpt"),
                     "--num-boost-round", str(ROUNDS // 2))
    return tmp_path / "ckpt"


def _resume(data, checkpoints: Path, model_dir: Path, *extra) -> tuple[list[dict], list[dict]]:
    """Run the whole job again on ``checkpoints``; its ranks' events, after checking that both
    workers continued from the first half's booster and trained only the missing rounds."""
    rank0, rank1 = (_events(out) for out, _ in _run_two_workers(
        data, model_dir, "--log-every", "10", "--checkpoint-dir", str(checkpoints), *extra))
    booster = str(checkpoints / f"booster-{ROUNDS // 2:06d}.txt")
    assert [(e["rank"], e["round"], e["path"]) for e in rank0 + rank1 if e["event"] == "resumed"] == [
        (0, ROUNDS // 2, booster), (1, ROUNDS // 2, booster)]
    assert [e["step"] for e in rank0 if e["event"] == "metrics"] == [30, 40], "only the missing rounds"
    return rank0, rank1


def _left(*rounds: int) -> list[str]:
    """What the checkpoint directory should hold: the boosters of ``rounds`` and each worker's scores."""
    return [f"booster-{n:06d}.txt" for n in rounds] + [f"scores-{r}of2-{n:06d}.npz" for r in (0, 1) for n in rounds]


def test_a_resumed_job_starts_from_its_saved_scores_and_predicts_as_an_uninterrupted_one(
        data, two_workers, interrupted, tmp_path):
    rank0, rank1 = _resume(data, interrupted, tmp_path / "resumed")
    assert [(e["rank"], e["path"]) for e in rank0 + rank1 if e["event"] == "scores_restored"] == [
        (rank, str(interrupted / f"scores-{rank}of2-{ROUNDS // 2:06d}.npz")) for rank in (0, 1)]
    import lightgbm as lgb

    X = np.load(data / "valid.npz")["X"]
    resumed, uninterrupted = (lgb.Booster(model_file=base / "model-0" / "model.txt").predict(X, raw_score=True)
                              for base in (tmp_path / "resumed", two_workers[0]))
    assert np.abs(resumed - uninterrupted).max() < 1e-9  # logits of probabilities: the raw scores within 1e-12
    assert sorted(p.name for p in interrupted.iterdir()) == _left(20, 30, 40), "the newest 3 by default"


def test_a_resumed_job_without_saved_scores_rescores_and_trains_the_same_trees(
        data, two_workers, interrupted, tmp_path):
    for scores in interrupted.glob("scores-*"):
        scores.unlink()
    rank0, rank1 = _resume(data, interrupted, tmp_path / "resumed", "--keep-checkpoints", "1")
    assert not [e for e in rank0 + rank1 if e["event"] == "scores_restored"]
    assert _trees(tmp_path / "resumed" / "model-0" / "model.txt") == _trees(two_workers[0] / "model-0" / "model.txt")
    assert sorted(p.name for p in interrupted.iterdir()) == _left(40), "the one resumed from went too"


def test_a_multiclass_model_reports_the_classification_metrics_of_its_class_probabilities(data, single, tmp_path):
    params = json.dumps({"objective": "multiclass", "num_class": 2, "learning_rate": 0.1, "num_leaves": 15})
    proc = subprocess.run(_trainer_argv(data, tmp_path, "--params-json", params, "--log-every", "10"), env=_env(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    events = _events(proc.stdout)
    metrics, result = [e for e in events if e["event"] == "metrics"], events[-1]
    assert set(result) == {"event", "num_trees", "accuracy", "f1", "log_loss", "auc"}, result
    assert result["num_trees"] == 2 * ROUNDS, "one tree per class and round"
    assert result["log_loss"] == pytest.approx(metrics[-1]["loss"], abs=1e-6), "LightGBM's own multi_logloss"
    assert result["accuracy"] > 0.9 and abs(result["auc"] - single[1][-1]["auc"]) < 0.005, "as good as binary"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--train-data", "/nonexistent/train.npz"], "data file not found: /nonexistent/train.npz"),
        (["--train-data", "x.npz", "--params-json", "{bad"], "--params-json is not valid JSON"),
        (["--train-data", "x.npz", "--params-json", "[1]"], "--params-json must be a JSON object"),
        (["--train-data", "x.npz", "--keep-checkpoints", "-1"], "not a count of checkpoints (0 or more): '-1'"),
    ],
)
def test_bad_input_exits_2_with_message(args, message):
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_ml_provider.runtime.lightgbm_trainer", *args],
        env=_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_params_defaults_yield_to_user_aliases_and_add_the_network():
    env = WorkerEnv(rank=1, num_workers=2, machines=["localhost:1200", "127.0.0.1:1201"], local_port=None,
                    model_dir=None, checkpoint_dir=None)  # fmt: skip
    params = build_params({"nthread": 4, "verbose": 1, "objective": "regression"}, env)
    assert "num_threads" not in params and "verbosity" not in params and "metric" not in params
    assert params["tree_learner"] == "data" and params["pre_partition"] is True
    assert params["num_machines"] == 2 and params["machines"] == "127.0.0.1:1200,127.0.0.1:1201", "names resolved"
    assert params["local_listen_port"] == 1201, "taken from this rank's entry when not set"
    assert build_params({}, WorkerEnv(0, 1, [], None, None, None)) == {
        "num_threads": 1, "verbosity": -1, "objective": "binary", "metric": ["binary_logloss", "auc"],
    }  # fmt: skip


def test_params_reject_a_machine_list_of_the_wrong_size():
    with pytest.raises(UsageError, match="lists 1 machines for 2 workers"):
        build_params({}, WorkerEnv(0, 2, ["h0:1200"], 1200, None, None))


def test_a_long_run_prints_a_burst_then_about_a_line_a_second_and_the_last_round(data, tmp_path):
    """Issue 45 D5: a 10,000-round run printed a line per round (1,759 in 90 s). 3,000 quick rounds now print the
    first 50, then about one a second, and the last (``runtime.metrics_log.StepLines``)."""
    import time

    rounds = 3000
    argv = _trainer_argv(data, tmp_path, "--num-boost-round", str(rounds))  # the later flag wins (argparse)
    started = time.monotonic()
    proc = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=600, check=False)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    steps = [e["step"] for e in _events(proc.stdout) if e["event"] == "metrics"]
    print(f"{rounds} rounds in {took:.1f} s: {len(steps)} metrics lines")
    assert steps[:50] == list(range(1, 51)) and steps[-1] == rounds
    assert len(steps) <= 50 + took + 2, (len(steps), took)
