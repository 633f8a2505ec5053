"""ml_batch_scoring over a real dataset: 200 Parquet files scored by 2 workers in one sharded job (every input row
exactly once, the predictions the model's own), and a run whose worker, then whole job, is SIGKILLed mid-run:
the resumed job scores only the shards not committed, with no row missing and none twice.

The model is the asset producer's (tests/dags/ml_asset_test_dags.py: a LightGBM model of 5 features, registered
and made champion); the data and the check run in the training environment, which has pyarrow."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import uuid
from pathlib import Path

import psutil
import pytest
from dag_runs import load_dag, run

from airflow_ml_provider.jobs.backends.local.common import JOB_UID_ENV
from airflow_ml_provider.plugins.training_view import page
from support import REPO, TEST_DAGS, TRAINING_PYTHON, needs_training_env, wait_for

pytestmark = [pytest.mark.integration, needs_training_env]

DATA = str(REPO / "tests" / "fixtures" / "shards" / "scoring_data.py")
NAME = f"asset_test_sharded_{uuid.uuid4().hex[:8]}"
HOME = Path(os.environ["AIRFLOW_HOME"])


@pytest.fixture(scope="module")
def champion(airflow_db) -> Path:
    """The producer's model, registered as NAME's champion (version 1); its file, which the check predicts with."""
    produced = load_dag(TEST_DAGS / "ml_asset_test_dags.py", "asset_producer").test(run_conf={"model_name": NAME})
    assert str(produced.state) == "success"
    return HOME / "ml" / "artifacts" / "asset-test" / NAME / "model.txt"


def dataset(files: int, rows: int) -> Path:
    folder = HOME / "ml" / "data" / "datasets" / uuid.uuid4().hex[:8]
    subprocess.run([str(TRAINING_PYTHON), DATA, "make", str(folder), str(files), str(rows), "5"], check=True)
    return folder


def check(folder: Path, output: str, model: Path) -> dict:
    done = subprocess.run([str(TRAINING_PYTHON), DATA, "check", str(folder), output, str(model)], check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout)


def score(folder: Path, workers: int = 2, view: bool = False):
    dag = load_dag(REPO / "dags" / "ml_batch_scoring.py")
    record = run(dag, {"model_name": NAME, "input": str(folder), "workers": workers})
    assert record.state == "success", record.states
    return (record.value("score"), record.value("score", "ml_training_view")) if view else record.value("score")


def test_a_200_file_parquet_dataset_is_scored_once_per_row_as_the_model_predicts(champion):
    folder = dataset(200, 50)
    result, view = score(folder, view=True)
    assert view["plan"] == {"unit": "shard", "total": 200}  # the training view's progress: shards settled
    assert "200 of 200 shards" in page({"ti": {"dag_id": "d", "task_id": "score", "state": "success"}, "view": view})
    assert result["version"] == 1 and result["input"] == str(folder) and result["rows"] == 200 * 50
    assert result["shards"] | {"failed_shards": []} == {
        "shards": 200, "shards_done": 200, "shards_ran": 200, "shards_skipped": 0, "shards_retried": 0,
        "shards_failed": 0, "failed_shards": []}
    found = check(folder, result["predictions"], champion)
    assert found["shards"] == 200 and found["rows"] == found["unique"] == 200 * 50
    assert found["ids"] == [i * 3 + 11 for i in range(200 * 50)], "every input row exactly once"
    assert found["mismatched"] == 0, "the predictions are the model's own predict on the same rows"
    assert found["lineage_ok"] == 200, "each shard names its model version, input file and that file's sha256"
    lineage = json.loads(Path(result["predictions"]).parent.joinpath("lineage.json").read_text())
    assert lineage["model_uri"] == f"models:/{NAME}/1" and lineage["shards"]["shards_done"] == 200
    assert lineage["predictions"] == "shards" and lineage["input"] == str(folder)


def _job_processes() -> list[psutil.Process] | None:
    """The scoring job's processes (launcher, sandbox, workers) with rank 1's worker first, found by one search of
    every process once that worker runs; None before."""
    found = []
    for proc in psutil.process_iter():
        try:
            found.append((proc, proc.environ(), " ".join(proc.cmdline())))
        except psutil.Error:
            continue
    rank1 = [(proc, env) for proc, env, cmdline in found
             if env.get("AIRFLOW_ML_RANK") == "1" and JOB_UID_ENV in env and NAME in cmdline]
    if not rank1:
        return None
    uid = rank1[0][1][JOB_UID_ENV]
    return [rank1[0][0], *(proc for proc, env, _ in found if env.get(JOB_UID_ENV) == uid and proc != rank1[0][0])]


def test_a_worker_then_the_whole_job_killed_mid_run_re_run_only_the_unfinished_shards(champion):
    folder = dataset(200, 4000)
    output = {}

    def kill() -> None:
        shards = lambda: len(list(HOME.glob("ml/artifacts/*/model/shards/shard-*/_COMMITTED")))  # noqa: E731
        procs = wait_for(_job_processes, timeout=300, what="the scoring job's rank 1")
        procs[0].send_signal(signal.SIGKILL)  # one worker, mid-run: the other goes on alone
        at = shards()
        wait_for(lambda: shards() >= at + 20, timeout=300, what="20 more shards scored")
        for proc in procs:  # then the whole job (found before: a search takes long on a loaded machine)
            try:
                proc.send_signal(signal.SIGKILL)
            except psutil.Error:
                continue
        output["killed"] = True

    killer = threading.Thread(target=kill)
    killer.start()
    result = score(folder)
    killer.join()
    assert output.get("killed"), "the job ended before it could be killed"
    found = check(folder, result["predictions"], champion)
    assert found["ids"] == [i * 3 + 11 for i in range(200 * 4000)], "no row missing, none twice"
    assert found["mismatched"] == 0
    shards = result["shards"]
    assert len(found["jobs"]) == 2, f"two attempts of the job committed shards: {found['jobs']}"
    assert shards["shards_skipped"] + shards["shards_ran"] == 200
    assert sorted(found["jobs"].values()) == sorted([shards["shards_skipped"], shards["shards_ran"]]), \
        "the resumed attempt ran exactly the shards the first had not committed"
    assert shards["shards_skipped"] >= 20
    first = (HOME / "ml" / "jobs" / f"{result['job_name']}.1" / "output.log").read_text()
    assert re.search(r"\[launcher\] rank 1 ended \(exit -9\) (while running shard \d+: it waits again|between shards)",
                     first), "the job went on without the killed worker"
