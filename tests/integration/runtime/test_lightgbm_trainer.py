"""LightGBM trainer as real processes: native 2-worker data-parallel training matches one process."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

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


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


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


def test_two_workers_match_single_process_auc(data, single, tmp_path):
    ports = _free_ports(2)
    machines = ",".join(f"127.0.0.1:{p}" for p in ports)
    procs = [
        subprocess.Popen(
            _trainer_argv(data, tmp_path / f"model-{rank}", "--log-every", "10"),
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
    assert "total number of machines: 2" in outputs[1][0] + outputs[1][1]
    rank0, rank1 = (_events(out) for out, _ in outputs)
    assert [e["step"] for e in rank0 if e["event"] == "metrics"] == [10, 20, 30, 40]
    assert rank1 == [], "only rank 0 reports"
    assert (tmp_path / "model-0" / "model.txt").exists() and not (tmp_path / "model-1").exists()
    result = rank0[-1]
    assert result["event"] == "result" and result["num_trees"] == ROUNDS
    assert abs(result["auc"] - single[1][-1]["auc"]) < 0.002


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--train-data", "/nonexistent/train.npz"], "data file not found: /nonexistent/train.npz"),
        (["--train-data", "x.npz", "--params-json", "{bad"], "--params-json is not valid JSON"),
        (["--train-data", "x.npz", "--params-json", "[1]"], "--params-json must be a JSON object"),
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
