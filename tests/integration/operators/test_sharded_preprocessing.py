"""Preprocessing as ONE sharded job (issue 43), run for real with dag.test() on the local backend: the job's
launcher SIGKILLed mid-run, the task resubmits the job (a preemption: no Airflow retry spent) and the new attempt
re-runs only the parts the first had not committed; every part is committed exactly once, by one attempt or the
other, counted from the commit markers. The DAG: tests/dags/ml_preprocess_test_dags.py (each part slowed by
tests/fixtures/shards/slow_preprocess.py so the job can be killed mid-run)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from dag_runs import load_dag, run

from airflow_ml_provider.labels import DAG_ID as DAG_LABEL
from support import TEST_DAGS, needs_training_env, wait_for

pytestmark = [pytest.mark.integration, needs_training_env]

HOME = Path(os.environ["AIRFLOW_HOME"])
DAG_ID = "ml_preprocess_sharded_test"
PARTS = 12


def _attempt(started: float) -> dict | None:
    """The preprocessing job's current attempt (its record and launcher) once its launcher runs; None before."""
    for record in HOME.glob("ml/jobs/aml-preprocess-*/job.json"):
        job = json.loads(record.read_text())
        launcher = record.parent / "launcher.json"
        if job["labels"].get(DAG_LABEL) == DAG_ID and job["submitted_at"] >= started and launcher.exists():
            return {**job, "pid": json.loads(launcher.read_text())["pid"]}
    return None


def _committed(started: float) -> list[Path]:
    return [marker for marker in HOME.glob(f"ml/data/{DAG_ID}/*/processed/shard-*/_COMMITTED")
            if marker.stat().st_mtime >= started]


def test_a_killed_launcher_s_job_is_resubmitted_and_re_runs_only_the_parts_not_committed(airflow_db):
    started, seen = time.time(), {}

    def kill() -> None:
        seen["first"] = wait_for(lambda: _attempt(started), timeout=300, what="the preprocessing job's launcher")
        wait_for(lambda: len(_committed(started)) >= 3, timeout=300, what="3 parts committed")
        os.kill(seen["first"]["pid"], signal.SIGKILL)  # the job's launcher: its sandbox and workers end with it
        seen["at_kill"] = len(_committed(started))

    killer = threading.Thread(target=kill)
    killer.start()
    record = run(load_dag(TEST_DAGS / "ml_preprocess_test_dags.py", "preprocess_sharded"),
                 {"parts": PARTS, "delay": 0.4})
    killer.join()
    assert record.state == "success", record.states
    assert "at_kill" in seen, "the job ended before its launcher could be killed"
    assert [key for key in record.states if key[0] == "preprocess"] == [("preprocess", -1)], "one task instance"

    inputs, processed = record.value("raw_parts"), Path(record.value("raw_parts", "processed"))
    markers = {int(m.parent.name.removeprefix("shard-")): json.loads(m.read_text())
               for m in processed.glob("shard-*/_COMMITTED")}
    assert sorted(markers) == list(range(PARTS)), "every part committed, once: one directory each"
    by_job = Counter(marker["job"] for marker in markers.values())
    first = by_job[seen["first"]["uid"]]
    assert len(by_job) == 2 and seen["at_kill"] <= first < PARTS, (by_job, seen["at_kill"])
    shards = record.value("preprocess")["shards"]
    assert (shards["shards"], shards["shards_done"], shards["shards_failed"]) == (PARTS, PARTS, 0)
    assert (shards["shards_skipped"], shards["shards_ran"]) == (first, PARTS - first), \
        "the resubmitted attempt ran exactly the parts the killed one had not committed"
    for index, path in enumerate(inputs):
        assert markers[index]["inputs"] == [path]
        with np.load(processed / f"shard-{index:06d}" / Path(path).name) as part:
            X, y = part["X"], part["y"]
        assert len(y) == 45 and np.isfinite(X).all() and X.max() <= 10, "cleaned: NaN rows dropped, clipped"
    archived = HOME / "ml" / "jobs" / f"{record.value('preprocess')['job_name']}.1" / "job.json"
    assert json.loads(archived.read_text())["uid"] == seen["first"]["uid"], "the killed attempt, archived"
