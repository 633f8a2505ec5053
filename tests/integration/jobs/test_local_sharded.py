"""Sharded jobs on the local backend with real, sandboxed processes: N shards over M workers, each shard's output
committed exactly once, a resubmitted job skipping what is committed, per-shard retries and failures, and a worker
(or the whole job) killed mid-run re-running only the shards that were in flight."""

from __future__ import annotations

import json
import re
import signal
from collections import Counter
from pathlib import Path

import psutil
import pytest

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend, job_processes
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState
from support import TRAINING_IMAGE, final_status, job_log, job_uid, needs_training_env, wait_for

pytestmark = [pytest.mark.integration, needs_training_env]

WORKER = str(Path(__file__).parents[2] / "fixtures" / "shards" / "ids_shard.py")


@pytest.fixture
def backend(tmp_path) -> LocalBackend:
    return LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=5)


def sharded(backend: LocalBackend, name: str, count: int, workers: int = 2, serve: bool = False,
            **plan) -> TrainingJobSpec:
    model_dir = f"{backend.default_artifact_dir(name)}/model"
    env = {key: str(plan.pop(key)) for key in ("SHARD_DELAY_S", "SHARD_FAIL", "SHARD_CRASH", "SHARD_ROWS_BAD")
           if key in plan}
    return TrainingJobSpec(framework="generic", command=["python", WORKER, *(["--serve"] if serve else [])],
                           num_workers=workers, model_dir=model_dir, env=env,
                           shards={"count": count, "output": f"{model_dir}/shards", "in_process": serve,
                                   "inputs": [[f"/data/{i}"] for i in range(count)], **plan})


def committed_ids(spec: TrainingJobSpec) -> list[int]:
    out = Path(spec.shards.output)
    ids = []
    for shard in sorted(out.glob("shard-*")):
        assert (shard / "_COMMITTED").is_file()
        ids += [int(line) for line in (shard / "ids.txt").read_text().split()]
    return ids


def result(backend: LocalBackend, name: str, job_dir: Path | None = None) -> dict:
    text = ((job_dir or backend.job_dir(name)) / "output.log").read_text()
    [line] = [line for line in text.splitlines() if line.startswith('[launcher] {"event": "result"')]
    return json.loads(line.removeprefix("[launcher] "))


def starts(text: str) -> Counter:
    return Counter(int(m) for m in re.findall(r"\] start (\d+)$", text, re.MULTILINE))


@pytest.mark.parametrize("serve", [False, True], ids=["a-process-per-shard", "many-shards-in-one-process"])
def test_every_shard_is_committed_once_and_a_resubmitted_job_skips_them_all(backend, serve):
    name = f"shards-{int(serve)}"
    spec = sharded(backend, name, 23, workers=3, serve=serve)
    assert backend.submit(name, spec, {})
    assert final_status(backend, name).state is JobState.SUCCEEDED, job_log(backend, name)
    assert sorted(committed_ids(spec)) == list(range(230))
    log = job_log(backend, name)
    assert starts(log) == Counter(range(23)), "each shard ran once"
    assert {line.split("]")[0] for line in log.splitlines() if line.endswith(tuple(f"start {i}" for i in range(23)))} \
        == {"[rank 0", "[rank 1", "[rank 2"}, "every worker took shards from the queue"
    assert "shards 23/23  rows 230" in log  # a program run per shard tells its rows in _ROWS
    assert result(backend, name) == {**result(backend, name), "shards_ran": 23, "shards_skipped": 0, "rows": 230}
    assert not list(Path(spec.shards.output).glob("shard-*/_ROWS")), "the count is data for the launcher, not output"
    assert backend.submit(name, spec, {})  # the same job again (a cleared task): nothing left to run
    assert final_status(backend, name).state is JobState.SUCCEEDED
    assert result(backend, name)["shards_skipped"] == 23 and not starts(job_log(backend, name))
    assert sorted(committed_ids(spec)) == list(range(230))


def test_a_per_shard_programs_rows_file_that_is_no_count_is_ignored_naming_the_shard(backend):
    spec = sharded(backend, "rows-bad", 6, SHARD_ROWS_BAD="2,3,4")  # 2: text with code in it; 3: a link; 4: a folder
    assert backend.submit("rows-bad", spec, {})
    assert final_status(backend, "rows-bad").state is JobState.SUCCEEDED, job_log(backend, "rows-bad")
    log = job_log(backend, "rows-bad")
    assert "shard 2: _ROWS is not a whole number ('10; import os'); its rows are not counted" in log
    assert "shard 3: _ROWS cannot be read (Too many levels of symbolic links); its rows are not counted" in log
    assert "shard 4: _ROWS is not a file; its rows are not counted" in log
    assert result(backend, "rows-bad")["rows"] == 30 and sorted(committed_ids(spec)) == list(range(60))
    assert not list(Path(spec.shards.output).glob("shard-*/_ROWS"))


def test_a_shard_failing_every_try_fails_the_job_naming_it_and_its_last_lines(backend):
    spec = sharded(backend, "fails", 6, SHARD_FAIL=4, max_attempts=2)
    backend.submit("fails", spec, {})
    status = final_status(backend, "fails")
    assert status.state is JobState.FAILED
    assert "shard 4 failed 2 time(s) (max_attempts 2)" in status.message
    assert "shard 4 cannot parse its input" in status.message, "its last lines are named"
    assert starts(job_log(backend, "fails"))[4] == 2, "the report-shaped line it printed was no report"
    assert not (Path(spec.shards.output) / "shard-000004").exists()


def test_a_worker_reporting_a_shard_it_was_not_handed_is_ignored_and_said_so(backend):
    forge = ("import os; os.write(0, b'{\"index\": 5, \"state\": \"done\"}\\n'); "
             "from airflow_ml_provider.runtime.shards import serve; raise SystemExit(serve(lambda shard: 1))")
    spec = sharded(backend, "forges", 6, workers=1, serve=True).model_copy(update={"command": ["python", "-c", forge]})
    backend.submit("forges", spec, {})
    assert final_status(backend, "forges").state is JobState.SUCCEEDED, job_log(backend, "forges")
    assert "[launcher] ignored: worker 0 reported shard 5, which it was not running" in job_log(backend, "forges")
    assert result(backend, "forges")["shards_ran"] == 6, "shard 5 still ran: the forged report settled nothing"


def test_a_worker_that_dies_of_itself_spends_a_try_and_with_none_left_the_job_fails(backend):
    spec = sharded(backend, "crashes", 5, serve=True, SHARD_CRASH=2, max_attempts=5)
    backend.submit("crashes", spec, {})
    status = final_status(backend, "crashes")
    assert status.state is JobState.FAILED, "not a preemption: nothing killed them from outside"
    assert re.search(r"every worker ended \(rank 0 \(exit 1\), rank 1 \(exit 1\)\) with 1 shard\(s\) not done",
                     status.message), status.message
    assert job_log(backend, "crashes").count("while running shard 2: it waits again (a failed try)") == 2
    assert sorted(committed_ids(spec)) == [i for s in (0, 1, 3, 4) for i in range(10 * s, 10 * s + 10)]


def test_max_failed_shards_lets_the_job_succeed_listing_the_failed_ones(backend):
    spec = sharded(backend, "tolerates", 6, SHARD_FAIL="1,4", max_attempts=1, max_failed_shards=2, serve=True)
    backend.submit("tolerates", spec, {})
    status = final_status(backend, "tolerates")
    assert status.state is JobState.SUCCEEDED and "[1, 4]" in status.message
    assert result(backend, "tolerates")["failed_shards"] == [1, 4]
    assert sorted(committed_ids(spec)) == [i for s in (0, 2, 3, 5) for i in range(10 * s, 10 * s + 10)]


def _worker(backend: LocalBackend, name: str, rank: int) -> psutil.Process:
    uid = job_uid(backend, name)
    for proc in job_processes(uid):
        try:
            if proc.environ().get("AIRFLOW_ML_RANK") == str(rank) and "shards.py" in " ".join(proc.cmdline()):
                return proc
        except psutil.Error:
            continue
    return None


def test_a_worker_killed_mid_run_gives_its_shard_to_the_others(backend):
    spec = sharded(backend, "lose-one", 30, SHARD_DELAY_S=0.2)
    backend.submit("lose-one", spec, {})
    wait_for(lambda: len(starts(job_log(backend, "lose-one"))) >= 6, what="some shards")
    wait_for(lambda: _worker(backend, "lose-one", 1), what="rank 1's worker").send_signal(signal.SIGKILL)
    assert final_status(backend, "lose-one").state is JobState.SUCCEEDED, job_log(backend, "lose-one")
    ids = committed_ids(spec)
    assert sorted(ids) == list(range(300)), "no row missing, none twice"
    log = job_log(backend, "lose-one")
    assert re.search(r"rank 1 ended \(exit -9\) (while running shard \d+: it waits again|between shards)", log)
    again = [index for index, n in starts(log).items() if n > 1]
    assert len(again) <= 1, f"only the lost worker's shard ran again: {again}"


def test_a_job_killed_whole_mid_run_resumes_with_only_the_unfinished_shards(backend):
    name = "lose-all"
    spec = sharded(backend, name, 40, SHARD_DELAY_S=0.1, serve=True)
    backend.submit(name, spec, {})
    wait_for(lambda: len(list(Path(spec.shards.output).glob("shard-*"))) >= 10, what="a quarter committed")
    for proc in job_processes(job_uid(backend, name)):
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:  # (ended meanwhile)
            continue
    assert final_status(backend, name).state is JobState.PREEMPTED
    wait_for(lambda: not job_processes(job_uid(backend, name)), what="every process of the job gone")
    done_before = len(list(Path(spec.shards.output).glob("shard-*")))
    assert backend.submit(name, spec, {})
    assert final_status(backend, name).state is JobState.SUCCEEDED, job_log(backend, name)
    resumed = result(backend, name)
    assert resumed["shards_skipped"] == done_before and resumed["shards_ran"] == 40 - done_before
    first = (backend.job_dir(name).parent / f"{name}.1" / "output.log").read_text()
    runs = starts(first) + starts(job_log(backend, name))
    assert set(runs) == set(range(40)) and sum(runs.values()) - 40 <= 2, f"only shards in flight re-ran: {runs}"
    assert sorted(committed_ids(spec)) == list(range(400))
